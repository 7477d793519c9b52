#include "mcx/distributed/data_plane/tcp/stream.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <openssl/err.h>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/distributed/data_plane/tcp/shared_memory_link.h"
#include "mcx/distributed/data_plane/tcp/tls.h"

namespace mcx::distributed {

void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

DataPlaneStream::DataPlaneStream(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {
  const int flags = fcntl(fd_, F_GETFL, 0);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

DataPlaneStream::~DataPlaneStream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (fd_ >= 0) close(fd_);
}

void DataPlaneStream::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

DataPlaneStream::Result DataPlaneStream::tls_result(int rc, size_t moved) {
  const int err = SSL_get_error(ssl_, rc);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return {Io::kWouldBlock, moved, {}};
    case SSL_ERROR_WANT_WRITE:
      want_write_ = true;
      return {Io::kWouldBlock, moved, {}};
    case SSL_ERROR_ZERO_RETURN:
      return {Io::kClosed, moved, "the peer closed the TLS session"};
    case SSL_ERROR_SYSCALL: {
      const int e = errno;
      ERR_clear_error();
      return {Io::kClosed, moved, e == 0 ? std::string("the connection closed") : std::string(strerror(e))};
    }
    default:
      return {Io::kError, moved, absl::StrCat("TLS error: ", openssl_errors())};
  }
}

DataPlaneStream::Result DataPlaneStream::move_some(bool write, char* p, size_t len) {
  size_t moved = 0;
  while (moved < len) {
    if (ssl_ != nullptr) {
      want_write_ = false;
      const int chunk = static_cast<int>(std::min<size_t>(len - moved, size_t{1} << 30));
      ERR_clear_error();
      const int rc = write ? SSL_write(ssl_, p + moved, chunk) : SSL_read(ssl_, p + moved, chunk);
      if (rc <= 0) return tls_result(rc, moved);
      moved += static_cast<size_t>(rc);
      continue;
    }
    const ssize_t rc = write ? send(fd_, p + moved, len - moved, MSG_NOSIGNAL) : recv(fd_, p + moved, len - moved, 0);
    if (rc > 0 || (write && rc == 0)) {
      moved += static_cast<size_t>(rc);
      continue;
    }
    Result failed = socket_error(rc, write, moved);
    if (failed.io != Io::kDone) return failed;
  }
  return {Io::kDone, moved, {}};
}

DataPlaneStream::Result DataPlaneStream::socket_error(ssize_t rc, bool write, size_t moved) {
  if (rc == 0 && !write) return {Io::kClosed, moved, "the connection closed"};
  if (errno == EINTR) return {Io::kDone, moved, {}};
  if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::kWouldBlock, moved, {}};
  const bool closed = errno == ECONNRESET || errno == EPIPE;
  return {closed ? Io::kClosed : Io::kError, moved, strerror(errno)};
}

DataPlaneStream::Result DataPlaneStream::read_some(void* data, size_t len) {
  if (segment_) return shared_read(static_cast<char*>(data), len);
  return move_some(/*write=*/false, static_cast<char*>(data), len);
}

DataPlaneStream::Result DataPlaneStream::write_some(const void* head, size_t head_len, const void* body,
                                                    size_t body_len) {
  const char* a = static_cast<const char*>(head);
  const char* b = static_cast<const char*>(body);
  if (segment_) return shared_write(a, head_len, b, body_len);
  if (ssl_ == nullptr) return send_pieces(a, head_len, b, body_len);
  Result first = move_some(/*write=*/true, const_cast<char*>(a), head_len);
  if (first.io != Io::kDone || body_len == 0) return first;
  Result second = move_some(/*write=*/true, const_cast<char*>(b), body_len);
  second.bytes += first.bytes;
  return second;
}

DataPlaneStream::Result DataPlaneStream::send_pieces(const char* head, size_t head_len, const char* body,
                                                     size_t body_len) {
  size_t moved = 0;
  while (moved < head_len + body_len) {
    iovec iov[2];
    size_t pieces = 0;
    if (moved < head_len) iov[pieces++] = {const_cast<char*>(head) + moved, head_len - moved};
    const size_t body_at = moved > head_len ? moved - head_len : 0;
    if (body_at < body_len) iov[pieces++] = {const_cast<char*>(body) + body_at, body_len - body_at};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = pieces;
    const ssize_t rc = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (rc >= 0) {
      moved += static_cast<size_t>(rc);
      continue;
    }
    Result failed = socket_error(rc, /*write=*/true, moved);
    if (failed.io != Io::kDone) return failed;
  }
  return {Io::kDone, moved, {}};
}

short DataPlaneStream::prepare_poll(bool want_in, bool want_out, bool* ready) {
  *ready = false;
  if (!segment_) return static_cast<short>((want_in ? POLLIN : 0) | (want_out || want_write_ ? POLLOUT : 0));
  // With shared memory both wake-ups (bytes to read, room to write) come as doorbell bytes. Read the ones here
  // first, then raise the flags and look again: a doorbell rung for a flag raised earlier (and read now) may
  // be the only one that condition gets, so the condition is checked after the read, never before.
  drain_doorbells();
  const bool closed = !peer_closed_.empty();
  if (want_in && (!in_->consumer_may_sleep() || closed)) *ready = true;
  if (want_out && (!out_->producer_may_sleep() || closed)) *ready = true;
  return (want_in || want_out) ? POLLIN : 0;
}

bool DataPlaneStream::shared_memory_ready(bool want_in, bool want_out) const {
  return segment_ != nullptr && ((want_in && !in_->empty()) || (want_out && !out_->full()));
}

void DataPlaneStream::use_shared_memory(std::unique_ptr<SharedMemorySegment> segment, bool connector) {
  segment_ = std::move(segment);
  out_ = &segment_->ring(/*from_connector=*/connector);
  in_ = &segment_->ring(/*from_connector=*/!connector);
}

void DataPlaneStream::drain_doorbells() {
  char bytes[64];
  while (peer_closed_.empty()) {
    const ssize_t rc = recv(fd_, bytes, sizeof bytes, MSG_DONTWAIT);
    if (rc > 0) continue;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    peer_closed_ = rc == 0 ? std::string("the connection closed") : std::string(strerror(errno));
  }
}

void DataPlaneStream::ring_doorbell() {
  const char one = 1;
  while (peer_closed_.empty()) {
    const ssize_t rc = send(fd_, &one, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc >= 0 || errno == EAGAIN || errno == EWOULDBLOCK) return;  // a full socket holds doorbells already
    if (errno != EINTR) peer_closed_ = strerror(errno);
  }
}

DataPlaneStream::Result DataPlaneStream::shared_read(char* p, size_t len) {
  size_t moved = 0;
  while (moved < len) {
    bool wake = false;
    const size_t n = in_->read(p + moved, len - moved, &wake);
    if (wake) ring_doorbell();
    if (n == 0) {  // a reader still gets what the ring holds after the peer went
      if (!peer_closed_.empty() && in_->empty()) return {Io::kClosed, moved, peer_closed_};
      return {Io::kWouldBlock, moved, {}};
    }
    moved += n;
  }
  return {Io::kDone, moved, {}};
}

DataPlaneStream::Result DataPlaneStream::shared_write(const char* head, size_t head_len, const char* body,
                                                      size_t body_len) {
  if (!peer_closed_.empty()) return {Io::kClosed, 0, peer_closed_};
  size_t moved = 0;
  while (moved < head_len + body_len) {
    const size_t head_left = moved < head_len ? head_len - moved : 0;
    const size_t body_at = moved > head_len ? moved - head_len : 0;
    // (no arithmetic on a piece that is absent: its pointer may be null)
    const char* head_from = head_left > 0 ? head + (head_len - head_left) : nullptr;
    const char* body_from = body_at < body_len ? body + body_at : nullptr;
    bool wake = false;
    const size_t n = out_->write(head_from, head_left, body_from, body_len - body_at, &wake);
    if (wake) ring_doorbell();
    if (n == 0) return {Io::kWouldBlock, moved, {}};
    moved += n;
  }
  return {Io::kDone, moved, {}};
}

absl::Status DataPlaneStream::wait_ready(bool for_write, absl::Time deadline, const std::string& what) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("[data plane] ", what, " timed out"));
    }
    pollfd p{fd_, static_cast<short>(for_write || want_write_ ? POLLOUT : POLLIN), 0};
    const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1, 1000));
    const int rc = poll(&p, 1, ms);
    if (rc > 0) return absl::OkStatus();
    if (rc < 0 && errno != EINTR) return absl::UnavailableError(absl::StrCat("[data plane] ", what, ": poll: ", strerror(errno)));
  }
}

absl::Status DataPlaneStream::tls_handshake(absl::Time deadline) {
  if (ssl_ == nullptr) return absl::OkStatus();
  while (true) {
    ERR_clear_error();
    const int rc = SSL_do_handshake(ssl_);
    if (rc == 1) return absl::OkStatus();
    const int err = SSL_get_error(ssl_, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (absl::Status s = wait_ready(err == SSL_ERROR_WANT_WRITE, deadline, "the TLS handshake"); !s.ok()) return s;
      continue;
    }
    const std::string why = err == SSL_ERROR_SYSCALL ? std::string(errno ? strerror(errno) : "the connection closed")
                                                     : openssl_errors();
    return absl::UnavailableError(absl::StrCat("[data plane] the TLS handshake failed: ", why));
  }
}

absl::Status DataPlaneStream::move_all(bool write, void* data, size_t len, absl::Time deadline,
                                       const std::string& what) {
  char* p = static_cast<char*>(data);
  size_t moved = 0;
  while (moved < len) {
    Result r = write ? write_some(p + moved, len - moved) : read_some(p + moved, len - moved);
    moved += r.bytes;
    if (r.io == Io::kDone) break;
    if (r.io == Io::kClosed || r.io == Io::kError) {
      return absl::UnavailableError(absl::StrCat("[data plane] ", what, ": ", r.error));
    }
    if (absl::Status s = wait_ready(write, deadline, what); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DataPlaneStream::read_exact(void* data, size_t len, absl::Time deadline, const std::string& what) {
  return move_all(/*write=*/false, data, len, deadline, what);
}

absl::Status DataPlaneStream::write_all(const void* data, size_t len, absl::Time deadline, const std::string& what) {
  return move_all(/*write=*/true, const_cast<void*>(data), len, deadline, what);
}

}  // namespace mcx::distributed
