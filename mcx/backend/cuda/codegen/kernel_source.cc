#include "mcx/backend/cuda/codegen/kernel_source.h"

#include "mcx/backend/cuda/codegen/kernel_emitters.h"

namespace mcx::cuda::codegen {

absl::Status emit_kernel(const KernelSource& source, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  return std::visit([&](const auto& spec) { return emit_kernel(spec, name, m, target); }, source);
}

absl::StatusOr<PtxKernel> generate_ptx_kernel(const KernelSource& source, int arch, const std::string& name) {
  return generate_kernel(name, arch, [&](llvm::Module& m, const KernelTarget& target) {
    return emit_kernel(source, name, m, target);
  });
}

}  // namespace mcx::cuda::codegen
