// A GPU kernel for threefry2x32 (the counter-based PRNG of mcx::random, as JAX's): each thread enciphers
// whole counter pairs with the 20-round Threefry-2x32 under the u32[2] key, in the CPU kernel's integer
// operations, so the GPU's random bits equal the CPU's. Kernel parameters: the key's, counts' and output's
// device pointers, then the number of pairs n (i64). No LLVM in this header.
#pragma once

namespace mcx::cuda::codegen {

struct ThreefryKernelSpec {};  // the kernel has no parameters

}  // namespace mcx::cuda::codegen
