// The CPU and CUDA platforms registered once in a test process that does not make the runtime's devices (the
// backend tests, the gpu label): registered_platform("cpu") or ("cuda").
#pragma once

#include <string_view>

#include "mcx/platform/platform.h"

namespace mcx::test {

// The platform `name`, registering both on the first call. Throws mcx::Error for another name.
Platform& registered_platform(std::string_view name);

}  // namespace mcx::test
