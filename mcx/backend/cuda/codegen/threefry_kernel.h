// A GPU kernel for threefry2x32 (the counter-based PRNG of mcx::random, as JAX's): each thread enciphers
// whole counter pairs with the 20-round Threefry-2x32 under the u32[2] key, in the CPU kernel's integer
// operations, so the GPU's random bits equal the CPU's. Kernel parameters: the key's, counts' and output's
// device pointers, then the number of pairs n (i64). No LLVM in this header; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/element_kernel.h"

namespace mcx::cuda::codegen {

absl::StatusOr<PtxKernel> generate_threefry_kernel(int arch, const std::string& name);

}  // namespace mcx::cuda::codegen
