// DataPlaneStream: one connection of the data plane's own transport (tcp_peer_group.h), plaintext or TLS 1.3
// (tcp/tls.h), over a non-blocking TCP socket.
//
// read_some / write_some never block: they move what the socket (and the TLS layer) can take now and say why
// they stopped (kWouldBlock, kClosed, kError). wants_write() tells an event loop to poll for POLLOUT although it
// has nothing queued (a TLS read that must write, e.g. a key update). The blocking helpers (handshake,
// read_exact, write_all) poll with a deadline: they serve the connection setup, never the collectives.
// Writes use MSG_NOSIGNAL (plaintext); TLS writes go through write(2), so the data plane ignores SIGPIPE
// (ignore_sigpipe_unless_handled) and a dead peer is an error, not a signal.
//
// Shared memory: a connection between two processes of one host may switch its bytes to a shared-memory segment
// (use_shared_memory, after the negotiation of shared_memory_link.h). read_some / write_some then move bytes
// through the segment's rings, and the socket only carries one-byte doorbells (sent when the other side said it
// sleeps) and the end of the connection (the peer exited or was killed: read_some reports kClosed once the ring
// is empty). prepare_poll says what an event loop should poll the socket for in either mode.
//
// Errors: DeadlineExceeded "[data plane] ... timed out", Unavailable for a closed or reset connection, naming
// `what` (the step) given by the caller.
// Thread-safety: one thread at a time; shutdown() from any thread (it wakes a blocked poll with an error).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <openssl/ssl.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace mcx::distributed {

class SharedMemoryRing;
class SharedMemorySegment;

class DataPlaneStream {
 public:
  // Takes ownership of fd (made non-blocking here) and ssl (may be null: plaintext).
  DataPlaneStream(int fd, SSL* ssl);
  ~DataPlaneStream();
  DataPlaneStream(const DataPlaneStream&) = delete;
  DataPlaneStream& operator=(const DataPlaneStream&) = delete;

  int fd() const { return fd_; }
  SSL* ssl() const { return ssl_; }

  enum class Io { kDone, kWouldBlock, kClosed, kError };
  struct Result {
    Io io = Io::kDone;
    size_t bytes = 0;   // moved before stopping
    std::string error;  // kError / kClosed: why
  };
  Result read_some(void* data, size_t len);
  Result write_some(const void* data, size_t len) { return write_some(data, len, nullptr, 0); }
  // Writes the bytes of `head` followed by those of `body` (a message's header and payload) without joining them
  // first: one publication on shared memory, one sendmsg(2) on plaintext TCP; TLS writes them in turn (two
  // records: a caller that cares joins small messages itself). `bytes` counts from the start of `head`.
  Result write_some(const void* head, size_t head_len, const void* body, size_t body_len);
  // Before an event loop sleeps on the socket: the events to poll it for while the caller waits to read
  // (want_in) or to write (want_out); the end of the connection (POLLHUP) is reported whatever is asked. With
  // shared memory, `*ready` says not to sleep but to read or write again at once: what the caller waits for
  // came meanwhile (this reads the doorbells that arrived, so they cannot wake a later poll).
  short prepare_poll(bool want_in, bool want_out, bool* ready);

  // From now on the bytes go through `segment` (shared_memory_link.h); `connector`: this end connected.
  void use_shared_memory(std::unique_ptr<SharedMemorySegment> segment, bool connector);
  bool uses_shared_memory() const { return segment_ != nullptr; }
  // Shared memory: whether bytes wait to be read (want_in) or the ring has room (want_out), looked at without
  // any system call (an event loop spins on it briefly before it sleeps). False without shared memory.
  bool shared_memory_ready(bool want_in, bool want_out) const;

  absl::Status tls_handshake(absl::Time deadline);  // no-op when plaintext
  absl::Status read_exact(void* data, size_t len, absl::Time deadline, const std::string& what);
  absl::Status write_all(const void* data, size_t len, absl::Time deadline, const std::string& what);

  // shutdown(2) both directions: the peer sees EOF and a local poll wakes.
  void shutdown();

 private:
  Result tls_result(int rc, size_t moved);
  Result move_some(bool write, char* p, size_t len);  // read_some / write_some (p is only read when writing)
  absl::Status wait_ready(bool for_write, absl::Time deadline, const std::string& what);
  // read_exact / write_all: moves len bytes, waiting with the deadline whenever the socket would block.
  absl::Status move_all(bool write, void* data, size_t len, absl::Time deadline, const std::string& what);
  // The shared-memory paths of read_some / write_some (as move_some and send_pieces are the socket's).
  Result shared_read(char* p, size_t len);
  Result shared_write(const char* head, size_t head_len, const char* body, size_t body_len);
  // Plaintext: sendmsg of the two pieces until done or the socket is full.
  Result send_pieces(const char* head, size_t head_len, const char* body, size_t body_len);
  // What a failed send/recv (rc <= 0) means: kClosed, kError, kWouldBlock; kDone: interrupted, try again.
  static Result socket_error(ssize_t rc, bool write, size_t moved);
  void drain_doorbells();  // reads the doorbell bytes that arrived; notes the end of the connection (prepare_poll)
  void ring_doorbell();
  int fd_;
  SSL* ssl_;
  bool want_write_ = false;
  std::unique_ptr<SharedMemorySegment> segment_;
  SharedMemoryRing* out_ = nullptr;
  SharedMemoryRing* in_ = nullptr;
  std::string peer_closed_;  // why the socket ended (shared memory: the peer is gone once its ring is empty)
};

// Ignores SIGPIPE unless the program installed its own handler (a peer that died must fail a write with
// EPIPE, not kill the process). Idempotent.
void ignore_sigpipe_unless_handled();

}  // namespace mcx::distributed
