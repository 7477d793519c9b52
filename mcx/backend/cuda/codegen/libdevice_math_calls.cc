#include "mcx/backend/cuda/codegen/libdevice_math_calls.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mcx::cuda::codegen {
namespace {

// libdevice's name stem for fn (the float version appends "f").
std::string_view stem(kernelgen::MathFn fn) {
  using kernelgen::MathFn;
  switch (fn) {
    case MathFn::kExp: return "exp";
    case MathFn::kLog: return "log";
    case MathFn::kLog1p: return "log1p";
    case MathFn::kExpm1: return "expm1";
    case MathFn::kTanh: return "tanh";
    case MathFn::kSin: return "sin";
    case MathFn::kCos: return "cos";
    case MathFn::kErf: return "erf";
    case MathFn::kErfc: return "erfc";
    case MathFn::kErfInv: return "erfinv";
    case MathFn::kPow: return "pow";
  }
  return "";
}

}  // namespace

llvm::Value* LibdeviceMathCalls::call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                                      llvm::ArrayRef<llvm::Value*> args) const {
  const bool is_double = args.front()->getType()->isDoubleTy();
  const std::string name = absl::StrCat("__nv_", std::string(stem(fn)), is_double ? "" : "f");
  return kernelgen::call_pure_function(b, m, name, args);
}

}  // namespace mcx::cuda::codegen
