#include "mcx/backend/cuda/codegen/kernel_source.h"

#include "mcx/backend/cuda/codegen/kernel_emitters.h"

namespace mcx::cuda::codegen {

absl::Status emit_kernel(const KernelSource& source, const std::string& name, llvm::Module& m,
                         const KernelTarget& target) {
  return std::visit(
      [&](const auto& spec) -> absl::Status {
        using Spec = std::decay_t<decltype(spec)>;
        if constexpr (std::is_same_v<Spec, ElementKernelSpec>) {
          return emit_element_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, ReduceKernelSpec>) {
          return emit_reduce_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, IotaKernelSpec>) {
          return emit_iota_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, ThreefryKernelSpec>) {
          return emit_threefry_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, SortPassKernelSpec>) {
          return emit_sort_pass_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, CumsumKernelSpec>) {
          return emit_cumsum_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, TakeKernelSpec>) {
          return emit_take_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, ScatterAddKernelSpec>) {
          return emit_scatter_add_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, DynamicWindowKernelSpec>) {
          return emit_dynamic_window_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, PadKernelSpec>) {
          return emit_pad_kernel(spec, name, m, target);
        } else if constexpr (std::is_same_v<Spec, ReduceWindowKernelSpec>) {
          return emit_reduce_window_kernel(spec, name, m, target);
        } else {
          static_assert(std::is_same_v<Spec, ConvKernelSpec>, "a kernel source without an emitter");
          return emit_conv_kernel(spec, name, m, target);
        }
      },
      source);
}

absl::StatusOr<PtxKernel> generate_ptx_kernel(const KernelSource& source, int arch, const std::string& name) {
  return generate_kernel(name, arch, [&](llvm::Module& m, const KernelTarget& target) {
    return emit_kernel(source, name, m, target);
  });
}

}  // namespace mcx::cuda::codegen
