#include "mcx/backend/cuda/driver_memory_source.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::cuda {

absl::StatusOr<uint64_t> DriverMemorySource::allocate(size_t bytes) {
  CUdeviceptr p = 0;
  MCX_RETURN_IF_ERROR(driver_status(api_, api_.cuMemAlloc(&p, bytes), absl::StrCat("cuMemAlloc(", bytes, ")")));
  return static_cast<uint64_t>(p);
}

void DriverMemorySource::release(uint64_t address, size_t bytes) {
  absl::Status st = driver_status(api_, api_.cuMemFree(static_cast<CUdeviceptr>(address)), "cuMemFree");
  if (!st.ok()) log_warn("[cuda] returning a {}-byte segment to the device failed: {}", bytes, std::string(st.message()));
}

absl::StatusOr<uint64_t> DriverMemorySource::record_event(uint64_t stream) {
  CUevent e = nullptr;
  MCX_RETURN_IF_ERROR(driver_status(api_, api_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
  absl::Status st = driver_status(api_, api_.cuEventRecord(e, reinterpret_cast<CUstream>(stream)), "cuEventRecord");
  if (!st.ok()) {
    api_.cuEventDestroy(e);
    return st;
  }
  return reinterpret_cast<uint64_t>(e);
}

bool DriverMemorySource::event_done(uint64_t event) {
  // Any answer but "not ready" (an error included) ends the wait: a failed stream runs nothing more.
  return api_.cuEventQuery(reinterpret_cast<CUevent>(event)) != CUDA_ERROR_NOT_READY;
}

void DriverMemorySource::destroy_event(uint64_t event) { api_.cuEventDestroy(reinterpret_cast<CUevent>(event)); }

}  // namespace mcx::cuda
