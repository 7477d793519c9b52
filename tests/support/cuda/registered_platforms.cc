#include "tests/support/cuda/registered_platforms.h"

#include <mutex>

#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/backend/cuda/cuda_platform.h"
#include "mcx/core/error.h"
#include "mcx/platform/platform_registry.h"

namespace mcx::test {

Platform& registered_platform(std::string_view name) {
  static std::once_flag once;
  std::call_once(once, [] {
    throw_if_error(cpu::register_cpu_platform());
    throw_if_error(cuda::register_cuda_platform());
  });
  return *value_or_throw(find_platform(name));
}

}  // namespace mcx::test
