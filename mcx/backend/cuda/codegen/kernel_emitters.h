// Each kernel generator's emitter, one overload per spec: fills a module with the kernel `name` for the spec and
// a target (kernel_skeleton.h). kernel_source.h turns them into PTX or host code; the specs and the kernels' parameters
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

absl::Status emit_kernel(const ElementKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const ReduceKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const IotaKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const ThreefryKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const SortPassKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const CumsumKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const TakeKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const ScatterAddKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const DynamicWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const ReduceWindowKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const ConvKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);
absl::Status emit_kernel(const PadKernelSpec& spec, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);

// The emitter of source's kind (the overload above for the spec it holds).
absl::Status emit_kernel(const KernelSource& source, const std::string& name, llvm::Module& m,
                         const KernelTarget& target);

}  // namespace mcx::cuda::codegen
