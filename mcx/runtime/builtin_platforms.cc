#include "mcx/runtime/builtin_platforms.h"

#include "mcx/backend/cpu/cpu_platform.h"

namespace mcx {

absl::Status register_builtin_platforms() { return cpu::register_cpu_platform(); }

}  // namespace mcx
