// What a kernel of a CUDA plan is generated from (one spec per kind of kernel, each described in its
// generator's header), and the two forms it is generated in: PTX for a GPU architecture, or LLVM bitcode for the
// host, which emulates the GPU to test the kernels' logic without one (the kernel runs as one thread; the entry
// point takes its parameters as cuLaunchKernel does; math through the host's C library, with
// mcx_emulated_erfinv/mcx_emulated_erfinvf for the inverse error function, which the runner defines). No LLVM
// in this header.
//
// Errors: the generator's (InvalidArgument for a malformed spec, Unimplemented for an op without a rule);
// Internal when LLVM lacks the target. Thread-safe.
#pragma once

#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/element_kernel.h"
#include "mcx/backend/cuda/codegen/indexing_kernels.h"
#include "mcx/backend/cuda/codegen/iota_kernel.h"
#include "mcx/backend/cuda/codegen/ptx_kernel.h"
#include "mcx/backend/cuda/codegen/reduce_kernel.h"
#include "mcx/backend/cuda/codegen/scan_kernel.h"
#include "mcx/backend/cuda/codegen/sort_kernel.h"
#include "mcx/backend/cuda/codegen/threefry_kernel.h"
#include "mcx/backend/cuda/codegen/window_kernels.h"

namespace mcx::cuda::codegen {

using KernelSource = std::variant<ElementKernelSpec, ReduceKernelSpec, IotaKernelSpec, ThreefryKernelSpec,
                                  SortPassKernelSpec, CumsumKernelSpec, TakeKernelSpec, ScatterAddKernelSpec,
                                  DynamicWindowKernelSpec, PadKernelSpec, ReduceWindowKernelSpec, ConvKernelSpec>;

// The kernel `name` as PTX for sm_<arch>.
absl::StatusOr<PtxKernel> generate_ptx_kernel(const KernelSource& source, int arch, const std::string& name);

// The kernel `name` as LLVM bitcode for the host (optimised for any x86-64), entry point
// `void name(void** params)`.
absl::StatusOr<std::string> generate_host_kernel(const KernelSource& source, const std::string& name);

}  // namespace mcx::cuda::codegen
