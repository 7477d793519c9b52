// The stand-in driver's runner of host-emulated kernels (MCX_CUDA_KERNEL_TARGET=host, docs/gpu.md): a module
// image is "MCXHOSTK", the bitcode's length (u64, little-endian) and LLVM bitcode whose kernels have entry points
// `void name(void** params)`. Each module is added to LLVM's JIT in its own library, with the C library's math
// functions and mcx_emulated_erfinv[f] visible to it. Thread-safe.
#pragma once

#include <cstddef>
#include <string>

namespace mcx::fake_cuda {

using KernelEntry = void (*)(void** params);

// Whether image (of unknown length) starts as a host kernel image.
bool is_host_kernel_image(const void* image);

// Loads a host kernel image; returns a module id > 0, or 0 with *error set.
size_t load_host_module(const void* image, std::string* error);
// The kernel `name` of module id, or nullptr.
KernelEntry host_kernel(size_t module, const char* name);
// Drops module id (its kernels must not run again). False when there is no such module.
bool unload_host_module(size_t module);

}  // namespace mcx::fake_cuda
