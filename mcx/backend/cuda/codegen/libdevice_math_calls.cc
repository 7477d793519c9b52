#include "mcx/backend/cuda/codegen/libdevice_math_calls.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mcx::cuda::codegen {

llvm::Value* LibdeviceMathCalls::call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                                      llvm::ArrayRef<llvm::Value*> args) const {
  const bool is_double = args.front()->getType()->isDoubleTy();
  // libdevice spells the C names, but erfinv for the inverse error function.
  const std::string stem = fn == kernelgen::MathFn::kErfInv ? "erfinv" : std::string(kernelgen::math_fn_name(fn));
  const std::string name = absl::StrCat("__nv_", stem, is_double ? "" : "f");
  return kernelgen::call_pure_function(b, m, name, args);
}

}  // namespace mcx::cuda::codegen
