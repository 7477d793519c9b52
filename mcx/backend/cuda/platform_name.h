// The CUDA platform's name, as MCX_PLATFORMS, cache keys, device names ("cuda:0") and messages spell it.
#pragma once

namespace mcx::cuda {

inline constexpr const char* kCudaPlatformName = "cuda";

}  // namespace mcx::cuda
