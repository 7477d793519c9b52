// An LLVM module of GPU kernels to PTX for one architecture, as XLA's GPU backend does it: libdevice linked in
// (only the functions the kernels call, internalised), NVVM reflection with subnormals kept, LLVM's -O3
// pipeline for the NVPTX target, then the NVPTX code generator's PTX. Works without a GPU or a driver.
// Includes LLVM headers: private to mcx/backend/cuda/codegen. Thread-safe (a target machine per call; the
// module is the caller's).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "llvm/IR/Module.h"

namespace mcx::cuda::codegen {

// The PTX ISA version the generated code declares (8.0: CUDA 12.0 and newer assemble it, sm_90 needs it).
inline constexpr const char* kPtxFeatures = "+ptx80";

// Sets m's target (nvptx64-nvidia-cuda, sm_<arch>) and data layout, links libdevice, optimises and returns the
// PTX. m is consumed (optimised in place). InvalidArgument when the module does not verify; Internal when
// LLVM's NVPTX target is missing from the LLVM mcx links.
absl::StatusOr<std::string> module_to_ptx(llvm::Module& m, int arch);

}  // namespace mcx::cuda::codegen
