// The GPU's math functions for generated code (kernelgen/math_calls.h): calls of CUDA's libdevice
// (__nv_expf, __nv_log, ...), linked into each kernel module (nvptx_compiler.h) and compiled with
// subnormals kept (no flush to zero). Their results are within a few ulp of the CPU's (docs/gpu.md gives the
// bounds the differential test checks), not bit-identical. Includes LLVM headers: private to
// mcx/backend/cuda/codegen. Stateless.
#pragma once

#include "mcx/kernelgen/math_calls.h"

namespace mcx::cuda::codegen {

class LibdeviceMathCalls final : public kernelgen::MathCalls {
 public:
  llvm::Value* call(llvm::IRBuilder<>& b, llvm::Module& m, kernelgen::MathFn fn,
                    llvm::ArrayRef<llvm::Value*> args) const override;
};

}  // namespace mcx::cuda::codegen
