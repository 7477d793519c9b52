#include "mcx/runtime/builtin_platforms.h"

#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/core/error.h"
#ifdef MCX_WITH_CUDA
#include "mcx/backend/cuda/cuda_platform.h"
#endif

namespace mcx {

absl::Status register_builtin_platforms() {
  // Once per process: a second registration of a platform already in use would fail (the registry refuses to
  // replace it), and devices are made again after a failed first attempt.
  static const absl::Status* registered = new absl::Status([]() -> absl::Status {
    MCX_RETURN_IF_ERROR(cpu::register_cpu_platform());
#ifdef MCX_WITH_CUDA
    MCX_RETURN_IF_ERROR(cuda::register_cuda_platform());
#endif
    return absl::OkStatus();
  }());
  return *registered;
}

}  // namespace mcx
