// The coordination service's fast path (server side): the calls a job makes most (key-value operations,
// barriers, live-set agreements) over plain length-prefixed TCP frames (fast_path_wire.h) instead of gRPC.
// gRPC stays the front door: registration, heartbeats, the watch stream, errors and shutdown go through it,
// and the Register response tells each task the fast path's port. A gRPC unary call costs two HTTP/2 streams'
// worth of framing and several thread hand-offs on each side; with dozens of processes on a few cores that,
// not the service, was the control plane's cost (docs/distributed.md, "The fast path").
//
// One reactor thread (epoll) accepts connections, reads frames and runs each request through the shared
// handlers (coordination_rpc.h). Replies are written by whichever thread completes the request (the reactor,
// another request's completion, or the service's timer thread), directly to the socket when it has room;
// the reactor flushes what did not fit. A connection that sends a malformed stream is closed; a malformed
// request gets an error reply and the connection keeps serving. A reply whose connection closed is dropped.
//
// Security: the fast path has no TLS. GrpcCoordinationServer starts it only when mTLS is off (the plaintext
// gRPC edge has no authentication either); with mTLS every call goes through gRPC (docs/security.md).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/coordination_service.h"

namespace mcx::distributed {

class FastPathServer {
 public:
  // Listens on `host` (an address or name this machine owns; "" or "::" or "0.0.0.0" = every interface) and
  // `port` (0 = a free port). `service` must outlive the server. Errors: UNAVAILABLE "[coordination] the fast
  // path cannot listen on HOST:PORT: ..." (address in use, unknown host).
  static absl::StatusOr<std::unique_ptr<FastPathServer>> start(CoordinationService* service, const std::string& host,
                                                               int port);
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
