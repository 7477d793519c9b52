#include "mcx/kernelgen/math_calls.h"

#include <string>
#include <vector>

namespace mcx::kernelgen {

std::string_view math_fn_name(MathFn fn) {
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
    case MathFn::kErfInv: return "erf_inv";
    case MathFn::kPow: return "pow";
  }
  return "?";
}

int math_fn_arity(MathFn fn) { return fn == MathFn::kPow ? 2 : 1; }

llvm::CallInst* call_pure_function(llvm::IRBuilder<>& b, llvm::Module& m, std::string_view name,
                                   llvm::ArrayRef<llvm::Value*> args) {
  llvm::Type* t = args.front()->getType();
  llvm::Function* f = m.getFunction(name);
  if (f == nullptr) {
    std::vector<llvm::Type*> params(args.size(), t);
    f = llvm::Function::Create(llvm::FunctionType::get(t, params, false), llvm::Function::ExternalLinkage,
                               std::string(name), m);
    f->setDoesNotThrow();
    f->setDoesNotAccessMemory();
    f->setWillReturn();
  }
  llvm::CallInst* call = b.CreateCall(f, args);
  call->setDoesNotAccessMemory();
  return call;
}

}  // namespace mcx::kernelgen
