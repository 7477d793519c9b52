// Each kernel generator's emitter: fills a module with the kernel `name` for a spec and a target
// (kernel_skeleton.h). kernel_source.h turns them into PTX or host code; the specs and the kernels' parameters
// are described in each generator's header. Includes LLVM headers: private to mcx/backend/cuda/codegen.
// Thread-safe for distinct modules.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "llvm/IR/Module.h"
#include "mcx/backend/cuda/codegen/element_kernel.h"
#include "mcx/backend/cuda/codegen/indexing_kernels.h"
#include "mcx/backend/cuda/codegen/iota_kernel.h"
#include "mcx/backend/cuda/codegen/kernel_skeleton.h"
#include "mcx/backend/cuda/codegen/kernel_source.h"
#include "mcx/backend/cuda/codegen/reduce_kernel.h"
#include "mcx/backend/cuda/codegen/scan_kernel.h"
#include "mcx/backend/cuda/codegen/sort_kernel.h"
#include "mcx/backend/cuda/codegen/threefry_kernel.h"
#include "mcx/backend/cuda/codegen/window_kernels.h"

namespace mcx::cuda::codegen {

absl::Status emit_element_kernel(const ElementKernelSpec& spec, const std::string& name, llvm::Module& m,
                                 const KernelTarget& target);
absl::Status emit_reduce_kernel(const ReduceKernelSpec& spec, const std::string& name, llvm::Module& m,
                                const KernelTarget& target);
absl::Status emit_iota_kernel(const IotaKernelSpec& spec, const std::string& name, llvm::Module& m,
                              const KernelTarget& target);
absl::Status emit_threefry_kernel(const ThreefryKernelSpec& spec, const std::string& name, llvm::Module& m,
                                  const KernelTarget& target);
absl::Status emit_sort_pass_kernel(const SortPassKernelSpec& spec, const std::string& name, llvm::Module& m,
                                   const KernelTarget& target);
absl::Status emit_cumsum_kernel(const CumsumKernelSpec& spec, const std::string& name, llvm::Module& m,
                                const KernelTarget& target);
absl::Status emit_take_kernel(const TakeKernelSpec& spec, const std::string& name, llvm::Module& m,
                              const KernelTarget& target);
absl::Status emit_scatter_add_kernel(const ScatterAddKernelSpec& spec, const std::string& name, llvm::Module& m,
                                     const KernelTarget& target);
absl::Status emit_dynamic_window_kernel(const DynamicWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                                        const KernelTarget& target);
absl::Status emit_reduce_window_kernel(const ReduceWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                                       const KernelTarget& target);
absl::Status emit_conv_kernel(const ConvKernelSpec& spec, const std::string& name, llvm::Module& m,
                              const KernelTarget& target);
absl::Status emit_pad_kernel(const PadKernelSpec& spec, const std::string& name, llvm::Module& m,
                             const KernelTarget& target);

// The emitter of source's kind.
absl::Status emit_kernel(const KernelSource& source, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);

}  // namespace mcx::cuda::codegen
