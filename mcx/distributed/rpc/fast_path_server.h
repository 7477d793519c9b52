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
// One reactor thread (epoll) accepts connections, reads frames and runs each request through the shared
// handlers (rpc/handlers.h). A connection that closes while its registration waits abandons it, and the
// closing of a connection that carries a watch stream is a lost connection for the service (as with gRPC). Replies are written by whichever thread completes the request (the reactor,
// another request's completion, or the service's timer thread), directly to the socket when it has room;
// the reactor flushes what did not fit. A connection that sends a malformed stream is closed; a malformed
// request gets an error reply and the connection keeps serving. A reply whose connection closed is dropped.
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
  // does not speak the fast path (called on the reactor thread). Errors: INVALID_ARGUMENT for a malformed
  // address; UNAVAILABLE "[coordination] cannot listen on ADDR: ..." (address in use, unknown host).
  // `limiter` (optional) rate-limits each connection's requests (RESOURCE_EXHAUSTED frames beyond it).
  static absl::StatusOr<std::unique_ptr<FastPathServer>> start(CoordinationService* service,
                                                               const std::string& bind_address,
                                                               std::function<void(int fd)> hand_off,
                                                               std::shared_ptr<PeerRateLimiter> limiter = nullptr);
  ~FastPathServer();  // shutdown()

  int port() const;
  // Closes the listener and every connection (requests in flight get no reply; their clients see the
  // connection close) and joins the reactor thread. Idempotent.
  void shutdown();

  struct Impl;

 private:
  explicit FastPathServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcx::distributed
