// Linked into the test executables that also run on the test-only platform (tests/CMakeLists.txt): registers
// "test" (tests/support/test_platform.h) before main, so MCX_PLATFORMS=test can select it.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/test_platform.h"

namespace {

const bool registered = [] {
  const absl::Status s = mcx::test::register_test_platform();
  if (!s.ok()) {
    std::fprintf(stderr, "could not register the test platform: %s\n", std::string(s.message()).c_str());
    std::abort();
  }
  return true;
}();

}  // namespace
