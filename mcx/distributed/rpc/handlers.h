// The coordination service's calls in wire terms (coordination.proto), for both transports: the gRPC edge
// (grpc_server.cc, grpc_client.cc) and the fast path (fast_path_server.h, fast_path_client.h).
//
// Rpc numbers every unary call (the fast path's op codes; never renumber one). Each serve_* function takes
// the request message, calls the service and hands the response message (status in-band) to `reply`, exactly
// once: at once for the calls that do not wait, later (from another call's thread or the service's timer
// thread) for those that do (register, shutdown, barrier, blocking KV get, live-set agreement). Identity checks
// (mTLS) and what a dropped connection means (registration abandoned, watch lost) stay with the transport.
//
// Thread-safety: as CoordinationService (every function may run concurrently).
#pragma once

#include <cstdint>
#include <functional>

#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/security/caller.h"

namespace mcx::distributed {

enum class Rpc : uint16_t {
  kRegister = 1,
  kHeartbeat = 2,
  kReportError = 3,
  kShutdown = 4,
  kWatch = 5,  // a stream: the fast path answers with one frame per job state
  kKvInsert = 6,
  kKvGet = 7,
  kKvIncrement = 8,
  kKvDir = 9,
  kKvDelete = 10,
  kBarrier = 11,
  kCancelBarrier = 12,
  kLiveTasks = 13,
  kStatus = 14,
  kEndJob = 15,
};

// The call's method name in coordination.proto ("KvInsert", "GetStatus", ...), for messages and the audit log.
std::string_view rpc_name(Rpc rpc);

template <typename Response>
using Reply = std::function<void(Response)>;

// Register and rejoin (RegisterRequest.rejoin): a rejoin is answered at once, a registration when every task
// registered (or it failed).
void serve_register(CoordinationService& s, const proto::RegisterRequest& req, Reply<proto::RegisterResponse> reply);
void serve_heartbeat(CoordinationService& s, const proto::HeartbeatRequest& req, Reply<proto::HeartbeatResponse> reply);

// The service's count of requests the per-peer rate limit refused, by transport ("fast_path", "grpc").
metrics::Family<metrics::Counter>& rate_limited_requests(CoordinationService& s);
void serve_report_error(CoordinationService& s, const proto::ReportErrorRequest& req,
                        Reply<proto::StatusResponse> reply);
void serve_shutdown(CoordinationService& s, const proto::ShutdownRequest& req, Reply<proto::StatusResponse> reply);
void serve_status(CoordinationService& s, const proto::ServiceStatusRequest& req,
                  Reply<proto::ServiceStatusResponse> reply);

void serve_barrier(CoordinationService& s, const proto::BarrierRequest& req, Reply<proto::StatusResponse> reply);
void serve_live_tasks(CoordinationService& s, const proto::LiveTasksRequest& req,
                      Reply<proto::LiveTasksResponse> reply);

// The calls authorized against their caller (security/caller.h): the identity the gRPC edge bound to the call,
// or Caller::trusted() (the fast path, which runs only without identity binding; in-process code). Reads are
// filtered here (authorize_read), writes by the service.
void serve_kv_get(CoordinationService& s, const proto::KvGetRequest& req, Reply<proto::KvGetResponse> reply,
                  const Caller& caller);
void serve_kv_dir(CoordinationService& s, const proto::KvDirRequest& req, Reply<proto::KvDirResponse> reply,
                  const Caller& caller);  // leaves out the entries the caller may not read
void serve_kv_insert(CoordinationService& s, const proto::KvInsertRequest& req, Reply<proto::StatusResponse> reply,
                     const Caller& caller);
void serve_kv_increment(CoordinationService& s, const proto::KvIncrementRequest& req,
                        Reply<proto::KvIncrementResponse> reply, const Caller& caller);
void serve_kv_delete(CoordinationService& s, const proto::KvDeleteRequest& req, Reply<proto::KvDeleteResponse> reply,
                     const Caller& caller);
void serve_cancel_barrier(CoordinationService& s, const proto::CancelBarrierRequest& req,
                          Reply<proto::StatusResponse> reply, const Caller& caller);
void serve_end_job(CoordinationService& s, const proto::EndJobRequest& req, Reply<proto::StatusResponse> reply,
                   const Caller& caller);

}  // namespace mcx::distributed
