#include "mcx/backend/cuda/codegen/iota_kernel.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "llvm/IR/LLVMContext.h"
#include "mcx/backend/cuda/codegen/kernel_emitters.h"
#include "mcx/core/error.h"
#include "mcx/kernelgen/element_emitter.h"

namespace mcx::cuda::codegen {

absl::Status emit_kernel(const IotaKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  if (spec.dimension < 0 || spec.dimension >= static_cast<int64_t>(spec.dims.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("iota kernel dimension ", spec.dimension, " of a rank-", spec.dims.size(), " array"));
  }
  kernelgen::ElementEmitter e(m.getContext(), m, *target.math);
  llvm::IRBuilder<>& b = e.builder();
  return emit_grid_stride_kernel(m, b, target, name, {b.getPtrTy(), b.getInt64Ty()}, b.getInt64Ty(),
                                   [&](llvm::Function* f, llvm::Value* i) -> absl::Status {
                                     const std::vector<llvm::Value*> coords = row_major_coordinates(b, i, spec.dims);
                                     MCX_ASSIGN_OR_RETURN(llvm::Value * v,
                                                          e.convert(DType::kInt64, spec.dtype, coords[spec.dimension]));
                                     e.store_elem(f->getArg(0), spec.dtype, i, v);
                                     return absl::OkStatus();
                                   });
}

}  // namespace mcx::cuda::codegen
