// "test": a platform for the tests only, which proves that the runtime reaches devices through the platform
// interface (mcx/platform/) alone. Its devices' memory is host memory the runtime cannot see: a test buffer
// hides its storage (host_buffer() is nullptr), so every read of an array goes through to_host, and from_host
// and to_host copy, counted. It compiles through the CPU platform found by name (find_platform("cpu")) and wraps
// the executables so they take and make test buffers only; serialised executables carry their own magic.
//
// Registered (priority -1: never the default) by test_platform_registration.cc in the test executables that
// run on it; MCX_PLATFORMS=test selects it. Thread-safety: as the interface; the counters are atomic.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace mcx::test {

inline constexpr std::string_view kTestPlatformName = "test";

struct TestPlatformCounts {
  int64_t host_to_device = 0;  // from_host copies
  int64_t device_to_host = 0;  // to_host copies
  int64_t compiles = 0;
  int64_t executions = 0;
};
TestPlatformCounts test_platform_counts();

// Registers "test" with the platform registry. Idempotent.
absl::Status register_test_platform();

}  // namespace mcx::test
