#include "mcx/backend/cuda/cuda_device_buffer.h"

#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::cuda {

absl::StatusOr<std::shared_ptr<DeviceMemory>> DeviceMemory::allocate(const CudaDevice& device, size_t bytes,
                                                                     CudaDevice::Lane lane) {
  uint64_t address = 0;
  if (bytes > 0) {
    MCX_RETURN_IF_ERROR(device.make_current());
    MCX_ASSIGN_OR_RETURN(address, device.allocator().allocate(bytes, reinterpret_cast<uint64_t>(device.stream(lane))));
  }
  return std::shared_ptr<DeviceMemory>(new DeviceMemory(device, address, bytes));
}

DeviceMemory::~DeviceMemory() {
  if (bytes_ == 0) return;
  absl::Status st = device_.allocator().free(address_);
  if (!st.ok()) log_warn("[{}] freeing a {}-byte buffer: {}", device_.label(), bytes_, std::string(st.message()));
}

}  // namespace mcx::cuda
