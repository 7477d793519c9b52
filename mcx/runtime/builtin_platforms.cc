#include "mcx/runtime/builtin_platforms.h"

#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/core/error.h"
#ifdef MCX_WITH_CUDA
#include "mcx/backend/cuda/cuda_platform.h"
#endif

namespace mcx {

absl::Status register_builtin_platforms() {
  MCX_RETURN_IF_ERROR(cpu::register_cpu_platform());
#ifdef MCX_WITH_CUDA
  MCX_RETURN_IF_ERROR(cuda::register_cuda_platform());
#endif
  return absl::OkStatus();
}

}  // namespace mcx
