// A CUDA device's buffer (platform/device_buffer.h): a dense array in one GPU's memory, from that device's
// caching allocator. The memory goes back to the allocator when the last buffer over it is destroyed (a
// reshape shares its operand's memory); the allocator hands it out again only to work enqueued later on the
// device's stream, so a kernel still reading it is never overwritten. Empty arrays hold no memory.
//
// Thread-safety: immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/backend/cuda/platform_name.h"
#include "mcx/platform/device_buffer.h"

namespace mcx::cuda {

// Device memory owned by one or more buffers; freed into the device's allocator with the last one.
class DeviceMemory {
 public:
  // `bytes` (may be 0: no memory) on `device`, for work on `lane`'s stream (the allocator's stream order). The
  // allocator's errors (ResourceExhausted names the device).
  static absl::StatusOr<std::shared_ptr<DeviceMemory>> allocate(const CudaDevice& device, size_t bytes,
                                                                CudaDevice::Lane lane = CudaDevice::Lane::kCompute);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  uint64_t address() const { return address_; }
  size_t bytes() const { return bytes_; }
  const CudaDevice& device() const { return device_; }

 private:
  DeviceMemory(const CudaDevice& device, uint64_t address, size_t bytes)
      : device_(device), address_(address), bytes_(bytes) {}
  const CudaDevice& device_;
  const uint64_t address_;
  const size_t bytes_;
};

class CudaDeviceBuffer final : public DeviceBuffer {
 public:
  CudaDeviceBuffer(DType dtype, std::vector<int64_t> dims, std::shared_ptr<DeviceMemory> memory)
      : dtype_(dtype), dims_(std::move(dims)), memory_(std::move(memory)) {}
  std::string_view platform() const override { return kCudaPlatformName; }
  DType dtype() const override { return dtype_; }
  const std::vector<int64_t>& dims() const override { return dims_; }
  const Buffer* host_buffer() const override { return nullptr; }

  uint64_t address() const { return memory_->address(); }
  const CudaDevice& device() const { return memory_->device(); }
  const std::shared_ptr<DeviceMemory>& memory() const { return memory_; }

 private:
  const DType dtype_;
  const std::vector<int64_t> dims_;
  const std::shared_ptr<DeviceMemory> memory_;
};

}  // namespace mcx::cuda
