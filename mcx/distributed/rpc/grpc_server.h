// The gRPC edge of the coordination service (server side). gRPC headers stay in grpc_server.cc.
//
// Uses gRPC's callback API: a call that waits inside the service (register, barrier, live set, KV get,
// shutdown) holds no server thread while it waits. The watch stream of each task is a server-streaming
// call; when it ends without the task having shut down (the process died, the connection broke), the
// task fails at once (CoordinationService::end_watch with connection_lost).
// Unless mTLS is on (or it is turned off), the port also serves the fast path (fast_path_server.h): its
// listener owns the port and hands the connections that speak HTTP/2 to gRPC. With mTLS (mtls.h), requires
// client certificates; with bind_task_identity, authorizes every call by the role its certificate names
// (principal.h; the table in docs/security.md): a task-scoped call only by that task ("task/<id>" URI SAN),
// reads by any role, writes by tasks under the key rules, deletes and barrier cancels by their owner or an
// admin; PERMISSION_DENIED otherwise. With an audit log, records denials, admin calls, registrations and
// error reports (audit_log.h). Every call first passes the per-peer rate limit (RESOURCE_EXHAUSTED beyond it).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/security/audit_log.h"
#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

struct GrpcServerOptions {
  // "host:port"; port 0 picks a free port (see port()). E.g. "[::]:5000", "127.0.0.1:0".
  std::string bind_address = "[::]:0";
  MtlsOptions mtls;  // used as given (apply mtls_options_from_env first if wanted)
  // Whether to serve the fast path (fast_path_server.h) on the same port (unset: MCX_COORDINATION_FAST_PATH).
  // Never with mTLS.
  std::optional<bool> fast_path = std::nullopt;
  // The fast path's reactor threads (fast_path_server.h); 0: the default for the service's number of tasks (one
  // per 2,048 tasks, at most one per core).
  int fast_path_threads = 0;
  std::shared_ptr<AuditLog> audit_log;  // optional (mcx-coordinator --audit-log)
  // Requests per second each peer may make, on gRPC and the fast path (rate_limiter.h); 0: no limit. Unset:
  // MCX_COORDINATOR_RATE_LIMIT.
  std::optional<int64_t> rate_limit = std::nullopt;
};

class GrpcCoordinationServer {
 public:
  // Starts serving `service` (which must outlive the server). Errors: the mTLS validation errors;
  // UNAVAILABLE "[coordination] cannot bind ADDR" when the address is taken or invalid.
  static absl::StatusOr<std::unique_ptr<GrpcCoordinationServer>> start(CoordinationService* service,
                                                                       GrpcServerOptions options);
  ~GrpcCoordinationServer();  // shutdown()

  int port() const;               // the bound port
  bool serves_fast_path() const;  // whether the port also speaks the fast path
  // Ends every open call (watch streams end with UNAVAILABLE), stops accepting, waits at most
  // `grace` for handlers. Idempotent.
  void shutdown(absl::Duration grace = absl::Milliseconds(200));

 private:
  struct Impl;
  explicit GrpcCoordinationServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcx::distributed
