// The CPU platform's name ("cpu"): in its buffers, executables, cache keys and messages (cpu_platform.h).
#pragma once

#include <string_view>

namespace mcx::cpu {

inline constexpr std::string_view kCpuPlatformName = "cpu";

}  // namespace mcx::cpu
