// One GPU as the CUDA backend drives it: its primary context (retained for the life of the process), its
// properties, the in-order stream every kernel and every copy of an execution goes on (the runtime gives each
// device one queue of computations, so stream order is program order), a second stream for the copies of
// complete buffers to and from the host (uploads from the runtime's upload queue, downloads of ready arrays:
// they run on the copy engines while the kernels run), its caching
// allocator (caching_allocator.h, capped at MCX_GPU_MEMORY_FRACTION of the device's memory) and pinned host
// staging for transfers, a pair of buffers per stream.
//
// Errors: the driver's, as driver_status() words them, prefixed with the device ("[cuda:0] ...").
// Thread-safety: thread-safe; make_current() binds the context to the calling thread (each entry point of the
// platform calls it first).
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/backend/cuda/caching_allocator.h"
#include "mcx/backend/cuda/driver_api.h"
#include "mcx/core/mutex.h"

namespace mcx::cuda {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;        // "NVIDIA H200"
  std::array<unsigned char, 16> uuid{};  // the driver's UUID of the physical GPU (the same in every process)
  int arch = 0;            // compute capability as 10 * major + minor: 90 for sm_90
  int sm_count = 0;
  size_t total_memory = 0;
};

// The fraction of a device's memory the allocator may reserve: MCX_GPU_MEMORY_FRACTION (default 0.75, as JAX's
// XLA_PYTHON_CLIENT_MEM_FRACTION), in (0, 1]. InvalidArgument naming the variable for another value.
absl::StatusOr<double> gpu_memory_fraction();

class CudaDevice {
 public:
  // Opens device `ordinal`: retains its primary context, creates its stream and allocator.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> open(const DriverApi& api, int ordinal);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const CudaDeviceInfo& info() const { return info_; }
  const DriverApi& api() const { return api_; }
  // "GPU 0" in messages: the CUDA ordinal (the runtime names the same device by its job-wide id, "cuda:N").
  std::string label() const;
  // Makes the device's context current on the calling thread.
  absl::Status make_current() const;
  CUstream stream() const { return stream_; }
  // Which stream a transfer goes on: the computations' (in order with the kernels) or the copies'.
  enum class Lane { kCompute, kCopy };
  CUstream stream(Lane lane) const { return lane == Lane::kCompute ? stream_ : copy_stream_; }
  CachingAllocator& allocator() const { return *allocator_; }
  // Waits until all work enqueued on the stream has finished, or the deadline (DeadlineExceeded naming the
  // device).
  absl::Status synchronize(absl::Time deadline) const;
  // As synchronize, but also ends as soon as `abandon` (polled between queries) returns an error, which it
  // returns: a wait on work that depends on other processes stops when they failed.
  absl::Status synchronize_unless(absl::Time deadline, const std::function<absl::Status()>& abandon) const;
  // The driver's result as a Status naming this device and `what`.
  absl::Status check(CUresult r, std::string_view what) const;

  // Copies between host memory and device memory on `lane`'s stream through that lane's pinned staging buffers
  // (chunks of kStagingBytes, two in flight): to_device returns once the host data is staged (the copy
  // completes in stream order); to_host returns once the data is in `dst` (after the stream's earlier work).
  // Waits end at the deadline.
  absl::Status to_device(uint64_t dst, const void* src, size_t bytes, absl::Time deadline,
                         Lane lane = Lane::kCompute) const;
  absl::Status to_host(void* dst, uint64_t src, size_t bytes, absl::Time deadline, Lane lane = Lane::kCompute) const;
  // Waits until the copies' stream finished its work (DeadlineExceeded naming the device).
  absl::Status synchronize_uploads(absl::Time deadline) const;
  static constexpr size_t kStagingBytes = size_t{8} << 20;

 private:
  CudaDevice(const DriverApi& api, CudaDeviceInfo info) : api_(api), info_(std::move(info)) {}
  // A lane's pinned staging: one transfer at a time through its two buffers.
  struct Staging {
    Mutex mu;
    void* buffer[2] ABSL_GUARDED_BY(mu) = {nullptr, nullptr};
    CUevent copied[2] ABSL_GUARDED_BY(mu) = {nullptr, nullptr};  // the last copy from/to each
  };
  Staging& staging_of(Lane lane) const { return staging_[lane == Lane::kCompute ? 0 : 1]; }
  // Buffer `i` (0 or 1) of `s`, allocated on first use; waits until its last copy finished.
  absl::StatusOr<void*> staging(Staging& s, int i, absl::Time deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Polls query() (a cuStreamQuery or cuEventQuery) until it is no longer "not ready", backing off to 1 ms;
  // DeadlineExceeded naming `what` at the deadline, abandon()'s error when it has one. The driver's own waits
  // have no deadline.
  absl::Status wait(const std::function<CUresult()>& query, absl::Time deadline, std::string_view what,
                    const std::function<absl::Status()>& abandon = nullptr) const;

  const DriverApi& api_;
  const CudaDeviceInfo info_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream copy_stream_ = nullptr;
  std::unique_ptr<DeviceMemorySource> memory_;
  std::unique_ptr<CachingAllocator> allocator_;
  mutable Staging staging_[2];  // by lane
};

}  // namespace mcx::cuda
