#include "mcx/runtime/async_buffer.h"

#include <cassert>
#include <exception>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/platform/platform_registry.h"

namespace mcx {
namespace {

void run_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& fn : callbacks) {
    try {
      fn();
    } catch (const std::exception& e) {
      log_error("[AsyncBuffer::on_ready] a callback threw: {}", e.what());
    } catch (...) {
      log_error("[AsyncBuffer::on_ready] a callback threw a non-standard exception");
    }
  }
}

}  // namespace

std::shared_ptr<AsyncBuffer> AsyncBuffer::ready(std::shared_ptr<const DeviceBuffer> buffer) {
  auto b = std::make_shared<AsyncBuffer>();
  b->done_ = true;
  if (buffer == nullptr) b->status_ = absl::InternalError("[AsyncBuffer::ready] made ready with no buffer");
  b->buffer_ = std::move(buffer);
  return b;
}

std::shared_ptr<AsyncBuffer> AsyncBuffer::pending() { return std::make_shared<AsyncBuffer>(); }

void AsyncBuffer::set(std::shared_ptr<const DeviceBuffer> buffer) {
  if (buffer == nullptr) return set_error(absl::InternalError("[AsyncBuffer::set] completed with no buffer"));
  complete(std::move(buffer), absl::OkStatus());
}

void AsyncBuffer::set_error(absl::Status status) {
  if (status.ok()) status = absl::InternalError("[AsyncBuffer::set_error] completed with an OK status");
  complete(nullptr, std::move(status));
}

void AsyncBuffer::complete(std::shared_ptr<const DeviceBuffer> buffer, absl::Status status) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) {
      assert(false && "AsyncBuffer completed twice");
      return;
    }
    done_ = true;
    buffer_ = std::move(buffer);
    status_ = std::move(status);
    callbacks.swap(callbacks_);
    cv_.notify_all();
  }
  run_callbacks(std::move(callbacks));
}

bool AsyncBuffer::is_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

absl::StatusOr<std::shared_ptr<const DeviceBuffer>> AsyncBuffer::await_device(absl::Time deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] { return done_; };
  if (deadline == absl::InfiniteFuture()) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_until(lock, absl::ToChronoTime(deadline), done)) {
    return absl::DeadlineExceededError(
        "[await] the buffer was not ready by the deadline (its producer is still running or was never run)");
  }
  if (!status_.ok()) return status_;
  if (!donated_.empty()) {
    return absl::InvalidArgumentError("[Array] the array was deleted: its buffer was " + donated_);
  }
  return buffer_;
}

absl::Status AsyncBuffer::mark_donated(std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!donated_.empty()) {
    return absl::InvalidArgumentError("[donate] the array was already deleted: its buffer was " + donated_);
  }
  donated_ = reason.empty() ? std::string("donated") : std::move(reason);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const DeviceBuffer>> AsyncBuffer::take_donated(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] { return done_; };
  if (deadline == absl::InfiniteFuture()) {
    cv_.wait(lock, done);
  } else if (!cv_.wait_until(lock, absl::ToChronoTime(deadline), done)) {
    return absl::DeadlineExceededError("[donate] the donated buffer was not ready by the deadline");
  }
  if (!status_.ok()) return status_;
  taken_ = true;
  if (readers_ > 0) return buffer_;  // the leased reads still use it; the last one releases it
  return std::move(buffer_);
}

absl::StatusOr<ReadLease> AsyncBuffer::lease_read() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!donated_.empty()) {
      return absl::InvalidArgumentError("[Array] the array was deleted: its buffer was " + donated_);
    }
    ++readers_;
  }
  std::shared_ptr<AsyncBuffer> self = shared_from_this();
  std::shared_ptr<void> registration(nullptr, [self](void*) { self->end_read(); });
  return ReadLease(std::move(self), std::move(registration));
}

void AsyncBuffer::end_read() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--readers_ == 0 && taken_) buffer_.reset();
}

absl::StatusOr<std::shared_ptr<const DeviceBuffer>> ReadLease::await_device(absl::Time deadline) const {
  if (!buffer_) return absl::InternalError("[await] an empty read lease");
  AsyncBuffer& b = *buffer_;
  std::unique_lock<std::mutex> lock(b.mu_);
  auto done = [&] { return b.done_; };
  if (deadline == absl::InfiniteFuture()) {
    b.cv_.wait(lock, done);
  } else if (!b.cv_.wait_until(lock, absl::ToChronoTime(deadline), done)) {
    return absl::DeadlineExceededError(
        "[await] the buffer was not ready by the deadline (its producer is still running or was never run)");
  }
  if (!b.status_.ok()) return b.status_;
  return b.buffer_;
}

absl::StatusOr<Buffer> ReadLease::await(absl::Time deadline) const {
  MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> b, await_device(deadline));
  return host_copy(*b);
}

absl::StatusOr<Buffer> AsyncBuffer::await(absl::Time deadline) const {
  MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> b, await_device(deadline));
  return host_copy(*b);
}

absl::StatusOr<Buffer> host_copy(const DeviceBuffer& buffer) {
  if (const Buffer* host = buffer.host_buffer()) return *host;  // host memory: the storage itself
  MCX_ASSIGN_OR_RETURN(Platform * platform, find_platform(buffer.platform()));
  return platform->to_host(buffer);
}

bool AsyncBuffer::is_donated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !donated_.empty();
}

void AsyncBuffer::on_ready(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  std::vector<std::function<void()>> one;
  one.push_back(std::move(fn));
  run_callbacks(std::move(one));
}

}  // namespace mcx
