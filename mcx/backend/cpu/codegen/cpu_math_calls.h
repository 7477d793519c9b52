// The CPU's math functions for generated code (kernelgen/math_calls.h): calls of the math helpers
// (math_helpers.h), which compute through the interpreter's vmath, so generated kernels and the interpreter
// agree bit for bit. Each call site lists the helper's libmvec vector variants for the loop vectoriser, and exp
// is +0 below vmath's threshold as vmath computes it. Includes LLVM headers: private to
// mcx/backend/cpu/codegen. Immutable after construction.
#pragma once

#include "mcx/backend/cpu/codegen/fused_emitter.h"
#include "mcx/kernelgen/math_calls.h"

namespace mcx::cpu::codegen {

class CpuMathCalls final : public kernelgen::MathCalls {
 public:
  // variants must outlive this.
  explicit CpuMathCalls(const VectorVariants& variants) : variants_(variants) {}
  llvm::Value* call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                    llvm::ArrayRef<llvm::Value*> args) const override;

 private:
  // A call of the helper `name`, annotated with its vector variants.
  llvm::Value* call_helper(llvm::IRBuilder<>& b, llvm::Module& m, const std::string& name,
                           llvm::ArrayRef<llvm::Value*> args) const;

  const VectorVariants& variants_;
};

}  // namespace mcx::cpu::codegen
