// AsyncBuffer: the data of one shard, produced asynchronously by a device stream.
//
// A pending AsyncBuffer becomes ready exactly once, with a DeviceBuffer of the shard's device's platform
// (platform/device_buffer.h; set) or an error (set_error). Readers block until then or until a deadline:
// await_device() gives the buffer, await() its values in host memory (through the buffer's platform: no copy
// for the CPU's, a device-to-host copy for an accelerator's). Errors raised on a stream surface here, naming the
// failing op ("[dot_general on cpu:1] ..."), and propagate to every value computed from the failed one.
//
// Thread-safety: all members are thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/buffer.h"
#include "mcx/platform/device_buffer.h"

namespace mcx {

class AsyncBuffer;

// A read of an AsyncBuffer registered when the work that reads it was enqueued (a copy to another device, a
// send, a computation's non-donated input). It sees the data even if the array is donated after it was
// enqueued: a donation orders after every read enqueued before it (JAX's usage events), instead of failing a
// copy that the caller issued first. Copies share the registration; the read ends with the last copy.
class ReadLease {
 public:
  ReadLease() = default;  // empty: await() is Internal

  // Blocks until ready or deadline: the buffer, the producer's error, or DeadlineExceeded.
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> await_device(absl::Time deadline) const;
  // await_device(), then the values in host memory (host_copy).
  absl::StatusOr<Buffer> await(absl::Time deadline) const;

 private:
  friend class AsyncBuffer;
  ReadLease(std::shared_ptr<AsyncBuffer> buffer, std::shared_ptr<void> registration)
      : buffer_(std::move(buffer)), registration_(std::move(registration)) {}
  std::shared_ptr<AsyncBuffer> buffer_;
  std::shared_ptr<void> registration_;  // the last copy's destruction ends the read
};

class AsyncBuffer : public std::enable_shared_from_this<AsyncBuffer> {
 public:
  // buffer must not be null.
  static std::shared_ptr<AsyncBuffer> ready(std::shared_ptr<const DeviceBuffer> buffer);
  static std::shared_ptr<AsyncBuffer> pending();

  // Completes a pending buffer (a second completion is ignored and asserted in debug builds), then runs
  // the on_ready callbacks on the calling thread. set_error(OkStatus()) or set(nullptr) completes with an
  // Internal error.
  void set(std::shared_ptr<const DeviceBuffer> buffer);
  void set_error(absl::Status status);

  bool is_ready() const;
  // Blocks until ready or deadline: the buffer, the producer's error, or DeadlineExceeded.
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> await_device(absl::Time deadline = absl::InfiniteFuture()) const;
  // await_device(), then the values in host memory (host_copy).
  absl::StatusOr<Buffer> await(absl::Time deadline = absl::InfiniteFuture()) const;
  // Donation (jit donate_argnums): the array owning this buffer was given to a computation, which takes
  // the data with take_donated(); every other await() then fails with InvalidArgument naming `reason`
  // ("donated to jit of 'step' argument 0"), and the memory is released once the computation drops it.
  // mark_donated on an already donated buffer is InvalidArgument naming the first donation.
  absl::Status mark_donated(std::string reason);
  // take_donated leaves the data to the reads leased before the donation (the memory goes with the last).
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> take_donated(absl::Time deadline);
  bool is_donated() const;
  // Registers a read for work being enqueued now (see ReadLease). InvalidArgument ("the array was deleted")
  // when the buffer is donated already.
  absl::StatusOr<ReadLease> lease_read();

  // Runs fn once ready, with a buffer or an error (immediately, on this thread, if already ready; else on
  // the completing thread). fn must not throw (an exception is caught and logged).
  void on_ready(std::function<void()> fn);

 private:
  void complete(std::shared_ptr<const DeviceBuffer> buffer, absl::Status status);  // set / set_error

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::shared_ptr<const DeviceBuffer> buffer_;
  absl::Status status_;
  std::string donated_;  // non-empty once donated: the reason
  int readers_ = 0;      // leased reads not yet ended
  bool taken_ = false;   // take_donated ran: buffer_ stays only for the leased reads
  void end_read();
  friend class ReadLease;
  std::vector<std::function<void()>> callbacks_;
};

// The values of `buffer` in host memory, through its platform's to_host (platform/platform.h): the storage
// itself for host memory, a copy otherwise. Errors: NotFound for a platform this build lacks; the platform's.
absl::StatusOr<Buffer> host_copy(const DeviceBuffer& buffer);

}  // namespace mcx
