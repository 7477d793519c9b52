// CUDA's libdevice (the math library of NVVM, as LLVM bitcode), embedded in the binary at build time from the
// CUDA toolkit found by CMake, so that kernels are generated on machines with a driver but no toolkit. Private
// to mcx/backend/cuda/codegen.
#pragma once

#include <string_view>

namespace mcx::cuda::codegen {

// The bitcode of libdevice.10.bc (never empty in a build with the CUDA backend).
std::string_view libdevice_bitcode();

}  // namespace mcx::cuda::codegen
