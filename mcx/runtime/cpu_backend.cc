#include "mcx/runtime/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"

namespace mcx {

void set_num_cpu_threads(int n) {
  if (n < 1) {
    throw_if_error(absl::InvalidArgumentError(absl::StrCat("[set_num_cpu_threads] expected n >= 1, found ", n)));
  }
  cpu::set_num_threads(n);
}

int num_cpu_threads() { return cpu::num_threads(); }

}  // namespace mcx
