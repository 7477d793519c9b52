// One accepted connection of the coordinator's fast path (fast_path_server.h): the bytes read from it and not
// yet parsed, the replies queued for it, and what runs when it closes.
//
// Each connection belongs to one reactor thread of the server (its owner, FastPathConnectionOwner): the owner
// alone reads it, corks it, flushes it and closes it. Any thread may send(): on the owner's thread a reply is
// written to the socket at once when it has room; from any other thread it is queued and the owner is asked
// to write it (flush_later). So the replies one thread produces for thousands of connections (a barrier of
// every task released, a job-state change sent to every watcher) are written by every reactor in parallel,
// not by that one thread, and the socket (its epoll registration included) is only ever touched by its owner.
//
// Lifetime: reply functions of the service may keep a connection after it closed; send() on a closed connection
// drops the reply. The owner must close every connection it owns before it goes away (a connection that is
// open has a live owner).
//
// Thread-safety: send() from any thread; everything else on the owner's thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mcx/core/mutex.h"

namespace mcx::distributed {

class FastPathConnection;

// The reactor a connection belongs to. Thread-safety: both methods from any thread.
class FastPathConnectionOwner {
 public:
  virtual ~FastPathConnectionOwner() = default;
  // Whether the calling thread is this owner's.
  virtual bool is_current_thread() const = 0;
  // Asks the owner to write `c`'s queued replies on its own thread soon.
  virtual void flush_later(std::shared_ptr<FastPathConnection> c) = 0;
  // Counts a reply of `bytes` (the service's metrics).
  virtual void count_sent(size_t /*bytes*/) {}
};

class FastPathConnection : public std::enable_shared_from_this<FastPathConnection> {
 public:
  // A connection gives up on a client that stops reading once this much is queued for it (it is shut down).
  static constexpr size_t kMaxQueuedReplyBytes = size_t{256} << 20;

  // `fd`: a connected non-blocking socket, registered for EPOLLIN | EPOLLRDHUP in `epoll_fd` with data `id`.
  FastPathConnection(int fd, uint64_t id, int epoll_fd, FastPathConnectionOwner* owner);

  uint64_t id() const { return id_; }
  const std::string& peer() const { return peer_; }  // its name for the rate limit
  // Owner only: it is the only writer of fd_ (it closes), so its own reads need no lock, which the analysis
  // cannot express.
  int fd() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return fd_; }

  // Any thread. On the owner's thread: writes what the socket takes now and queues the rest (written when
  // there is room). On another: queues the frame for the owner. Dropped once the connection closed; a client
  // that has more than kMaxQueuedReplyBytes waiting is shut down (the owner sees the hang-up and closes).
  void send(std::string frame);

  // Owner, around serving the frames of one read: replies are queued while corked and written together by
  // uncork() (thousands of pipelined inserts get their acknowledgements in a few writes, not one each).
  void cork();
  bool uncork();  // false when the connection broke

  // Owner: writes what is queued (when the socket has room, or when another thread queued replies). False
  // when the connection broke.
  bool flush();

  // Owner: runs `f` when the connection closes (true: because the server shuts down).
  void on_close(std::function<void(bool server_stopping)> f);

  // Owner: stops watching, closes the socket (unless `release`: its owner is now someone else), drops queued
  // replies, then runs the on_close functions (not when released).
  void close(bool server_stopping, bool release = false);

  std::string in;         // owner only: bytes read and not yet parsed
  bool sniffed = false;   // owner only: the first bytes said this is a fast-path connection

 private:
  // Bytes written (0 when the socket is full), or -1 when it broke.
  ssize_t write_some(const char* p, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what the socket takes of out_; watches for room while some is left. False when it broke.
  bool write_queued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void watch_writable(bool on) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
  const uint64_t id_;
  const std::string peer_;
  const int epoll_fd_;
  FastPathConnectionOwner* const owner_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  bool writable_watched_ ABSL_GUARDED_BY(mu_) = false;
  bool corked_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;  // the owner has been asked to flush
  std::vector<std::function<void(bool)>> on_close_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mcx::distributed
