// The coordination service's fast path (server side): every call of coordination.proto, and the watch
// stream, over plain length-prefixed TCP frames (fast_path_wire.h) on the coordinator's own port. A gRPC call
// costs HTTP/2 framing and several thread hand-offs on each side, and a gRPC client costs milliseconds to
// start and a handful of threads; with dozens of processes on a few cores that, not the service, was the
// control plane's cost (docs/distributed.md, "The fast path").
//
// The listener owns the port. A connection whose first four bytes are the fast path's magic stays here; any
// other (gRPC's HTTP/2 preface: mcx-ctl, an agent with the fast path off) is handed, unread, to `hand_off`
// (GrpcCoordinationServer passes it to its gRPC server), so one address serves both.
//
// Reactor threads (epoll loops; one per kTasksPerReactor tasks of the job by default) share the connections:
// the first accepts and hands each new connection to the reactors in turn. A reactor reads its connections'
// frames and runs each request through the shared handlers (rpc/handlers.h). A connection that closes while its
// registration waits abandons it, and the closing of a connection that carries a watch stream is a lost
// connection for the service (as with gRPC). A reply produced on the connection's own reactor is written at once
// when the socket has room; one produced elsewhere (another reactor completing a barrier that thousands of
// connections wait on, the service's timer thread) is queued and written by the connection's reactor
// (fast_path_connection.h), so a barrier's release is written by every reactor in parallel. A connection that
// sends a malformed stream is closed; a malformed request gets an error reply and the connection keeps serving.
// A reply whose connection closed is dropped.
//
// Security: the fast path has no TLS. GrpcCoordinationServer starts it only when mTLS is off (the plaintext
// gRPC edge has no authentication either); with mTLS gRPC owns the port (docs/security.md).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {

class PeerRateLimiter;

class FastPathServer {
 public:
  // Listens on `bind_address` ("host:port" or "[v6]:port"; host "", "::" or "0.0.0.0" = every interface; port
  // 0 = a free one). `service` must outlive the server; `hand_off` takes ownership of each connection that
  // does not speak the fast path (called on the thread of the reactor that read its first bytes). Errors:
  // INVALID_ARGUMENT for a malformed address; UNAVAILABLE "[coordination] cannot listen on ADDR: ..." (address in
  // use, unknown host).
  // `limiter` (optional) rate-limits each connection's requests (RESOURCE_EXHAUSTED frames beyond it).
  // `reactor_threads`: 1 to kMaxReactorThreads (INVALID_ARGUMENT otherwise); hand_off must then be thread-safe.
  static absl::StatusOr<std::unique_ptr<FastPathServer>> start(CoordinationService* service,
                                                               const std::string& bind_address,
                                                               std::function<void(int fd)> hand_off,
                                                               std::shared_ptr<PeerRateLimiter> limiter = nullptr,
                                                               int reactor_threads = 1);

  static constexpr int kTasksPerReactor = 2048;
  static constexpr int kMaxReactorThreads = 16;
  static constexpr int kMaxDefaultReactorThreads = 8;
  // One reactor per kTasksPerReactor tasks, at most one per core and at most 8: a job of up to 2,048 tasks is
  // served by one thread; 16,384 tasks by 8 on a machine with 8 cores or more.
  static int default_reactor_threads(int num_tasks);
  ~FastPathServer();  // shutdown()

  int port() const;
  // Closes the listener and every connection (requests in flight get no reply; their clients see the
  // connection close) and joins the reactor threads. Idempotent.
  void shutdown();

  struct Impl;

 private:
  explicit FastPathServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcx::distributed
