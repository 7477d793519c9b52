// Stream: the in-order work queue of one local device, run by one thread.
//
// enqueue() returns at once; tasks run one after another in enqueue order. A task is a plain function:
// it waits for its inputs (AsyncBuffer::await), computes and completes its outputs, reporting failures
// through the outputs (never by throwing; an escaping exception is caught, logged and ends only that
// task). synchronize() waits until everything enqueued before it ran.
//
// The thread is started with the device and joined at process exit (no detached threads): the client's
// exit handler asks every stream to stop, and each drains its queue (tasks enqueued while draining,
// e.g. by another stream's task, still run) before its thread is joined. After a stream has shut down,
// enqueue() runs the task inline on the caller's thread, so late work is never lost.
// Thread-safety: enqueue/synchronize may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/runtime/device.h"

namespace mcx {

class Stream {
 public:
  explicit Stream(std::string name);
  ~Stream();  // shutdown(); must not run on the stream's own thread
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> task);
  // Waits until every task enqueued before the call has run. DeadlineExceeded (naming the stream) if the
  // queued work did not finish in time; FailedPrecondition when called from the stream's own thread
  // (it would wait for itself).
  absl::Status synchronize(absl::Time deadline = absl::InfiniteFuture());
  // Asks the thread to finish once its queue is empty; returns at once. Idempotent.
  void request_stop();
  // request_stop(), then joins the thread (blocks until the queue is drained). Idempotent. Called on the
  // stream's own thread (a task calling exit()), it only requests the stop.
  void shutdown();
  // Whether the calling thread is this stream's thread.
  bool is_current_thread() const;
  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The stream of a local device (InvalidArgument, thrown, for a device of another process).
Stream& stream_for(const Device& device);

// The queue that copies host data to `device` (InvalidArgument as stream_for): a stream of its own where the
// device's platform copies beside its computations (Platform::copies_beside_compute: a GPU), so that an upload
// does not wait behind the computations queued before it; else stream_for(device). Readers of the copied value
// wait for its AsyncBuffer, never for a queue, so the order of the two queues does not matter to them.
Stream& host_to_device_stream_for(const Device& device);

// Waits until the work queued for `device` before the call (its stream and its host-to-device queue) has run.
absl::Status synchronize_device(const Device& device, absl::Time deadline);

// Default deadline for waits on device work and for collectives: MCX_DEVICE_TIMEOUT_S seconds
// (default 300) from now. Every blocking wait in the runtime uses it unless the caller passes one.
absl::Time default_device_deadline();

}  // namespace mcx
