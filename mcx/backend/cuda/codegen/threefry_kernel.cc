#include "mcx/backend/cuda/codegen/threefry_kernel.h"

#include <memory>

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"

namespace mcx::cuda::codegen {

absl::Status emit_kernel(const ThreefryKernelSpec&, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  llvm::IRBuilder<> b(m.getContext());
  llvm::Type* u32 = b.getInt32Ty();
  return emit_grid_stride_kernel(
      m, b, target, name, {b.getPtrTy(), b.getPtrTy(), b.getPtrTy(), b.getInt64Ty()}, b.getInt64Ty(),
      [&](llvm::Function* f, llvm::Value* i) -> absl::Status {
        auto load = [&](llvm::Value* base, llvm::Value* at) {
          return b.CreateAlignedLoad(u32, b.CreateInBoundsGEP(u32, base, at), llvm::Align(4));
        };
        llvm::Value* k0 = load(f->getArg(0), b.getInt64(0));
        llvm::Value* k1 = load(f->getArg(0), b.getInt64(1));
        llvm::Value* ks[3] = {k0, k1, b.CreateXor(b.CreateXor(k0, k1), b.getInt32(0x1BD11BDAu))};
        llvm::Value* first = b.CreateMul(i, b.getInt64(2));
        llvm::Value* second = b.CreateAdd(first, b.getInt64(1));
        llvm::Value* x0 = b.CreateAdd(load(f->getArg(1), first), ks[0]);
        llvm::Value* x1 = b.CreateAdd(load(f->getArg(1), second), ks[1]);
        static constexpr int kRot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
        for (int block = 0; block < 5; ++block) {
          for (int j = 0; j < 4; ++j) {
            x0 = b.CreateAdd(x0, x1);
            const int r = kRot[block % 2][j];
            x1 = b.CreateOr(b.CreateShl(x1, r), b.CreateLShr(x1, 32 - r));  // rotate left by r
            x1 = b.CreateXor(x1, x0);
          }
          x0 = b.CreateAdd(x0, ks[(block + 1) % 3]);
          x1 = b.CreateAdd(x1, b.CreateAdd(ks[(block + 2) % 3], b.getInt32(static_cast<uint32_t>(block + 1))));
        }
        b.CreateAlignedStore(x0, b.CreateInBoundsGEP(u32, f->getArg(2), first), llvm::Align(4));
        b.CreateAlignedStore(x1, b.CreateInBoundsGEP(u32, f->getArg(2), second), llvm::Align(4));
        return absl::OkStatus();
      });
}

}  // namespace mcx::cuda::codegen
