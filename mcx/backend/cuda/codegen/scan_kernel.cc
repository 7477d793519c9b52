#include "mcx/backend/cuda/codegen/scan_kernel.h"

#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {

absl::Status emit_kernel(const CumsumKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  llvm::Type* i64 = b.getInt64Ty();
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), i64}, i64, [&](llvm::Function* f, llvm::Value* line) -> absl::Status {
        llvm::Value* base = b.CreateAdd(b.CreateMul(b.CreateUDiv(line, b.getInt64(spec.inner)),
                                                    b.getInt64(spec.length * spec.inner)),
                                        b.CreateURem(line, b.getInt64(spec.inner)));
        llvm::Type* acc_ty = e.compute_type(spec.dtype);
        llvm::IRBuilder<> entry(&f->getEntryBlock(), f->getEntryBlock().begin());
        llvm::AllocaInst* acc = entry.CreateAlloca(acc_ty);
        b.CreateStore(is_floating(spec.dtype) ? llvm::ConstantFP::get(acc_ty, 0.0) : llvm::ConstantInt::get(acc_ty, 0), acc);
        return e.counted_loop(f, b.getInt64(spec.length), /*parallel=*/false, [&](llvm::Value* s) -> absl::Status {
          llvm::Value* j = spec.reverse ? b.CreateSub(b.getInt64(spec.length - 1), s) : s;
          llvm::Value* at = b.CreateAdd(base, b.CreateMul(j, b.getInt64(spec.inner)));
          llvm::Value* x = e.load_elem(f->getArg(0), spec.dtype, at);
          llvm::Value* now = b.CreateLoad(acc_ty, acc);
          llvm::Value* sum = is_floating(spec.dtype) ? b.CreateFAdd(now, x)
                             : is_bool(spec.dtype)   ? b.CreateOr(now, x)
                                                     : b.CreateAdd(now, x);
          b.CreateStore(sum, acc);
          e.store_elem(f->getArg(1), spec.dtype, at, sum);
          return absl::OkStatus();
        });
      });
}

}  // namespace mcx::cuda::codegen
