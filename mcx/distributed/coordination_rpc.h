// The coordination service's requests in wire terms, for both transports: one function per call that the
// gRPC edge (grpc_server.cc) and the fast path (fast_path_server.h) both carry. Each takes the request message,
// calls the service and hands the response message (status in-band) to `reply`, exactly once: at once for the
// calls that do not wait, later (from another call's thread or the service's timer thread) for those that do
// (barrier, blocking KV get, live-set agreement). Identity checks (mTLS) stay with the transport.
//
// Thread-safety: as CoordinationService (every function may run concurrently).
#pragma once

#include <functional>

#include "mcx/distributed/coordination.pb.h"
#include "mcx/distributed/coordination_service.h"

namespace mcx::distributed {

template <typename Response>
using Reply = std::function<void(Response)>;

void serve_kv_insert(CoordinationService& s, const proto::KvInsertRequest& req, Reply<proto::StatusResponse> reply);
void serve_kv_get(CoordinationService& s, const proto::KvGetRequest& req, Reply<proto::KvGetResponse> reply);
void serve_kv_increment(CoordinationService& s, const proto::KvIncrementRequest& req,
                        Reply<proto::KvIncrementResponse> reply);
void serve_kv_dir(CoordinationService& s, const proto::KvDirRequest& req, Reply<proto::KvDirResponse> reply);
void serve_kv_delete(CoordinationService& s, const proto::KvDeleteRequest& req, Reply<proto::KvDeleteResponse> reply);
void serve_barrier(CoordinationService& s, const proto::BarrierRequest& req, Reply<proto::StatusResponse> reply);
void serve_cancel_barrier(CoordinationService& s, const proto::CancelBarrierRequest& req,
                          Reply<proto::StatusResponse> reply);
void serve_live_tasks(CoordinationService& s, const proto::LiveTasksRequest& req,
                      Reply<proto::LiveTasksResponse> reply);

}  // namespace mcx::distributed
