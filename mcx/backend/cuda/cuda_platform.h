// The CUDA platform ("cuda"; platform/platform.h): NVIDIA GPUs through the CUDA driver, loaded at run time.
// Usable where the driver loads and sees a device (usable() says "no CUDA driver: ..." otherwise, and why).
// Its devices are this process's GPUs (device_count()); buffers live in their memory (cuda_device_buffer.h),
// executables are CudaExecutables (cuda_executable.h lists what runs and the errors).
//
// It registers below the CPU platform while ops remain without a CUDA kernel: select it with
// MCX_PLATFORMS=cuda (or cpu,cuda to keep the CPU the default and reach the GPUs by name; docs/gpu.md).
//
// Thread-safety: as the interface: every member may be called from any thread.
#pragma once

#include "absl/status/status.h"

namespace mcx::cuda {

// The CUDA platform's registry priority: below the CPU's while ops remain without a CUDA kernel.
inline constexpr int kCudaPlatformPriority = -10;

// Registers "cuda" with the platform registry (platform_registry.h); the platform is made on first use.
absl::Status register_cuda_platform();

}  // namespace mcx::cuda
