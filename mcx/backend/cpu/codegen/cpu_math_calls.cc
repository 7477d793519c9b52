#include "mcx/backend/cpu/codegen/cpu_math_calls.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/Transforms/Utils/ModuleUtils.h"
#include "mcx/backend/cpu/vmath.h"

namespace mcx::cpu::codegen {

llvm::Value* CpuMathCalls::call_helper(llvm::IRBuilder<>& b, llvm::Module& m, const std::string& name,
                                       llvm::ArrayRef<llvm::Value*> args) const {
  llvm::CallInst* call = kernelgen::call_pure_function(b, m, name, args);
  auto it = variants_.find(name);
  if (it == variants_.end() || it->second.empty()) return call;
  llvm::Type* t = args.front()->getType();
  std::string mappings;
  for (const VectorVariant& v : it->second) {
    // Declare the vector function (kept alive through llvm.compiler.used so that nothing removes the
    // declaration before the vectoriser looks for it).
    if (m.getFunction(v.symbol) == nullptr) {
      llvm::Type* vt = llvm::FixedVectorType::get(t, v.width);
      std::vector<llvm::Type*> vparams(args.size(), vt);
      llvm::Function* vf = llvm::Function::Create(llvm::FunctionType::get(vt, vparams, false),
                                                  llvm::Function::ExternalLinkage, v.symbol, m);
      vf->setDoesNotThrow();
      vf->setDoesNotAccessMemory();
      vf->setWillReturn();
      llvm::appendToCompilerUsed(m, {vf});
    }
    if (!mappings.empty()) mappings += ",";
    absl::StrAppend(&mappings, "_ZGV_LLVM_N", v.width, std::string(args.size(), 'v'), "_", name, "(", v.symbol, ")");
  }
  call->addFnAttr(llvm::Attribute::get(m.getContext(), "vector-function-abi-variant", mappings));
  return call;
}

llvm::Value* CpuMathCalls::call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                                llvm::ArrayRef<llvm::Value*> args) const {
  const bool is_double = args.front()->getType()->isDoubleTy();
  const std::string name = absl::StrCat("mcx_cg_", std::string(kernelgen::math_fn_name(fn)), is_double ? "" : "f");
  if (fn != kernelgen::MathFn::kExp) return call_helper(b, m, name, args);
  // +0 below the threshold without calling the vector function (vmath.h kExpZeroBelowF), as vmath does.
  llvm::Value* x = args.front();
  llvm::Value* below = b.CreateFCmpOLT(
      x, llvm::ConstantFP::get(x->getType(), is_double ? kExpZeroBelowD : static_cast<double>(kExpZeroBelowF)));
  llvm::Value* zero = llvm::ConstantFP::get(x->getType(), 0.0);
  llvm::Value* one = llvm::ConstantFP::get(x->getType(), 1.0);
  llvm::Value* e = call_helper(b, m, name, {b.CreateSelect(below, zero, x)});
  return b.CreateFMul(e, b.CreateSelect(below, zero, one));  // as vmath's exp_or_zero: exp(0) * 0 is +0
}

}  // namespace mcx::cpu::codegen
