#include "mcx/distributed/rpc/fast_path_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mcx::distributed {

FastPathConnection::FastPathConnection(int fd, uint64_t id, int epoll_fd, FastPathConnectionOwner* owner)
    : fd_(fd), id_(id), peer_(absl::StrCat("fast-path connection ", id)), epoll_fd_(epoll_fd), owner_(owner) {}

void FastPathConnection::send(std::string frame) {
  MutexLock lock(&mu_);
  if (fd_ < 0) return;
  owner_->count_sent(frame.size());
  const bool on_owner = owner_->is_current_thread();
  size_t off = 0;
  if (on_owner && out_.empty() && !corked_) {
    ssize_t n = write_some(frame.data(), frame.size());
    if (n < 0) return;  // broken: the owner sees the error and closes
    off = static_cast<size_t>(n);
    if (off == frame.size()) return;
  }
  if (out_.size() + frame.size() - off > kMaxQueuedReplyBytes) {
    ::shutdown(fd_, SHUT_RDWR);  // the owner sees the hang-up and closes
    return;
  }
  out_.append(frame, off, std::string::npos);
  if (on_owner) {
    if (!corked_) watch_writable(true);
  } else if (!flush_requested_) {
    // Under mu_ while fd_ is open, so the owner is alive (it closes its connections before it goes away); it
    // never takes mu_ while it holds the lock of its flush queue.
    flush_requested_ = true;
    owner_->flush_later(shared_from_this());
  }
}

void FastPathConnection::cork() {
  MutexLock lock(&mu_);
  corked_ = true;
}

bool FastPathConnection::uncork() {
  MutexLock lock(&mu_);
  corked_ = false;
  return write_queued();
}

bool FastPathConnection::flush() {
  MutexLock lock(&mu_);
  flush_requested_ = false;
  return write_queued();
}

void FastPathConnection::on_close(std::function<void(bool server_stopping)> f) {
  MutexLock lock(&mu_);
  on_close_.push_back(std::move(f));
}

void FastPathConnection::close(bool server_stopping, bool release) {
  std::vector<std::function<void(bool)>> hooks;
  {
    MutexLock lock(&mu_);
    if (fd_ < 0) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
    if (!release) ::close(fd_);
    fd_ = -1;
    out_.clear();
    if (!release) hooks.swap(on_close_);
  }
  for (auto& f : hooks) f(server_stopping);  // outside the lock: they call into the service
}

ssize_t FastPathConnection::write_some(const char* p, size_t n) {
  while (true) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return w;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
}

bool FastPathConnection::write_queued() {
  if (fd_ < 0) return false;
  while (!out_.empty()) {
    ssize_t n = write_some(out_.data(), out_.size());
    if (n < 0) return false;
    if (n == 0) {  // full: the owner writes the rest when there is room
      watch_writable(true);
      return true;
    }
    out_.erase(0, static_cast<size_t>(n));
  }
  watch_writable(false);
  return true;
}

void FastPathConnection::watch_writable(bool on) {
  if (writable_watched_ == on) return;
  writable_watched_ = on;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
  ev.data.u64 = id_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_, &ev);
}

}  // namespace mcx::distributed
