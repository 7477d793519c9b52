// The caching allocator's source on a real GPU (caching_allocator.h): segments from cuMemAlloc, events from
// cuEventCreate / cuEventRecord / cuEventQuery. The device's context must be current on the calling thread
// (the allocator is called from the platform's entry points, which make it current). Thread-safe (the driver
// is).
#pragma once

#include "mcx/backend/cuda/caching_allocator.h"
#include "mcx/backend/cuda/driver_api.h"

namespace mcx::cuda {

class DriverMemorySource final : public DeviceMemorySource {
 public:
  explicit DriverMemorySource(const DriverApi& api) : api_(api) {}
  absl::StatusOr<uint64_t> allocate(size_t bytes) override;
  void release(uint64_t address, size_t bytes) override;
  absl::StatusOr<uint64_t> record_event(uint64_t stream) override;
  bool event_done(uint64_t event) override;
  void destroy_event(uint64_t event) override;

 private:
  const DriverApi& api_;
};

}  // namespace mcx::cuda
