#include "mcx/distributed/rpc/handlers.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "mcx/core/profiler.h"
#include "mcx/distributed/security/principal.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

std::vector<TaskId> ids(const google::protobuf::RepeatedField<int32_t>& r) { return {r.begin(), r.end()}; }

proto::StatusResponse status_response(const absl::Status& s) {
  proto::StatusResponse r;
  to_proto(s, r.mutable_status());
  return r;
}

}  // namespace

void serve_register(CoordinationService& s, const proto::RegisterRequest& req, Reply<proto::RegisterResponse> reply) {
  auto done = [reply = std::move(reply)](absl::StatusOr<RegisterResult> v) {
    proto::RegisterResponse r;
    to_proto(v.status(), r.mutable_status());
    if (v.ok()) r.set_service_incarnation(v->service_incarnation);
    reply(std::move(r));
  };
  if (req.rejoin()) {
    std::vector<PassedBarrier> passed;
    for (const proto::PassedBarrier& b : req.passed_barriers()) passed.push_back({b.name(), b.counter()});
    done(s.rejoin_task(req.task(), req.incarnation(), req.num_tasks(), req.live_set_generation(), passed));
  } else {
    s.register_task(req.task(), req.incarnation(), req.num_tasks(), absl::Milliseconds(req.timeout_ms()),
                    std::move(done));
  }
}

metrics::Family<metrics::Counter>& rate_limited_requests(CoordinationService& s) {
  return s.metrics_registry().counter("mcx_coordinator_rate_limited_requests_total",
                                      "requests refused by the per-peer rate limit (MCX_COORDINATOR_RATE_LIMIT), by "
                                      "transport",
                                      {"transport"});
}

void serve_heartbeat(CoordinationService& s, const proto::HeartbeatRequest& req, Reply<proto::HeartbeatResponse> reply) {
  proto::HeartbeatResponse r;
  to_proto(s.heartbeat(req.task(), req.incarnation()), r.mutable_status());
  r.set_service_incarnation(s.service_incarnation());
  r.set_service_clock_us(profiler::trace_clock_us());
  reply(std::move(r));
}

void serve_report_error(CoordinationService& s, const proto::ReportErrorRequest& req,
                        Reply<proto::StatusResponse> reply) {
  reply(status_response(s.report_error(req.task(), req.incarnation(), from_proto(req.error()))));
}

void serve_shutdown(CoordinationService& s, const proto::ShutdownRequest& req, Reply<proto::StatusResponse> reply) {
  s.shutdown_task(req.task(), req.incarnation(),
                  [reply = std::move(reply)](absl::Status v) { reply(status_response(v)); });
}

void serve_status(CoordinationService& s, const proto::ServiceStatusRequest&, Reply<proto::ServiceStatusResponse> reply) {
  proto::ServiceStatusResponse r;
  to_proto(s.status(), &r);
  to_proto(absl::OkStatus(), r.mutable_status());
  reply(std::move(r));
}

std::string_view rpc_name(Rpc rpc) {
  switch (rpc) {
    case Rpc::kRegister: return "Register";
    case Rpc::kHeartbeat: return "Heartbeat";
    case Rpc::kReportError: return "ReportError";
    case Rpc::kShutdown: return "Shutdown";
    case Rpc::kWatch: return "Watch";
    case Rpc::kKvInsert: return "KvInsert";
    case Rpc::kKvGet: return "KvGet";
    case Rpc::kKvIncrement: return "KvIncrement";
    case Rpc::kKvDir: return "KvDir";
    case Rpc::kKvDelete: return "KvDelete";
    case Rpc::kBarrier: return "Barrier";
    case Rpc::kCancelBarrier: return "CancelBarrier";
    case Rpc::kLiveTasks: return "GetLiveTasks";
    case Rpc::kStatus: return "GetStatus";
    case Rpc::kEndJob: return "EndJob";
  }
  return "?";
}

void serve_kv_insert(CoordinationService& s, const proto::KvInsertRequest& req, Reply<proto::StatusResponse> reply,
                     const Caller& caller) {
  reply(status_response(s.kv_insert(req.key(), req.value(), req.allow_overwrite(), caller)));
}

void serve_kv_get(CoordinationService& s, const proto::KvGetRequest& req, Reply<proto::KvGetResponse> reply,
                  const Caller& caller) {
  auto done = [reply = std::move(reply)](absl::StatusOr<std::string> v) {
    proto::KvGetResponse r;
    to_proto(v.status(), r.mutable_status());
    if (v.ok()) r.set_value(std::move(*v));
    reply(std::move(r));
  };
  if (const Principal* who = caller.principal()) {
    if (absl::Status read = authorize_read(*who, req.key()); !read.ok()) return done(read);
  }
  if (req.try_only()) {
    done(s.kv_try_get(req.key()));
  } else {
    s.kv_get(req.key(), absl::Milliseconds(req.timeout_ms()), std::move(done));
  }
}

void serve_kv_increment(CoordinationService& s, const proto::KvIncrementRequest& req,
                        Reply<proto::KvIncrementResponse> reply, const Caller& caller) {
  absl::StatusOr<int64_t> v = s.kv_increment(req.key(), req.delta(), caller);
  proto::KvIncrementResponse r;
  to_proto(v.status(), r.mutable_status());
  if (v.ok()) r.set_value(*v);
  reply(std::move(r));
}

void serve_kv_dir(CoordinationService& s, const proto::KvDirRequest& req, Reply<proto::KvDirResponse> reply,
                  const Caller& caller) {
  proto::KvDirResponse r;
  const Principal* who = caller.principal();
  for (KeyValue& kv : s.kv_dir(req.dir())) {
    if (who != nullptr && !authorize_read(*who, kv.key).ok()) continue;  // listed only to who may read it
    proto::KvEntry* e = r.add_entries();
    e->set_key(std::move(kv.key));
    e->set_value(std::move(kv.value));
  }
  to_proto(absl::OkStatus(), r.mutable_status());
  reply(std::move(r));
}

void serve_kv_delete(CoordinationService& s, const proto::KvDeleteRequest& req, Reply<proto::KvDeleteResponse> reply,
                     const Caller& caller) {
  proto::KvDeleteResponse r;
  absl::StatusOr<size_t> n = s.kv_delete(req.key(), caller);
  if (n.ok()) r.set_deleted(static_cast<int64_t>(*n));
  to_proto(n.status(), r.mutable_status());
  reply(std::move(r));
}

void serve_barrier(CoordinationService& s, const proto::BarrierRequest& req, Reply<proto::StatusResponse> reply) {
  s.barrier(req.task(), req.incarnation(), req.name(), req.counter(), ids(req.tasks()),
            absl::Milliseconds(req.timeout_ms()),
            [reply = std::move(reply)](absl::Status v) { reply(status_response(v)); });
}

void serve_cancel_barrier(CoordinationService& s, const proto::CancelBarrierRequest& req,
                          Reply<proto::StatusResponse> reply, const Caller& caller) {
  reply(status_response(s.cancel_barrier(req.name(), req.counter(), caller)));
}

void serve_end_job(CoordinationService& s, const proto::EndJobRequest& req, Reply<proto::StatusResponse> reply,
                   const Caller& caller) {
  reply(status_response(s.end_job(req.reason(), caller)));
}

void serve_live_tasks(CoordinationService& s, const proto::LiveTasksRequest& req,
                      Reply<proto::LiveTasksResponse> reply) {
  s.get_live_tasks(req.task(), req.incarnation(), LiveSetRequest{ids(req.tasks()), req.name(), req.payload()},
                   absl::Milliseconds(req.timeout_ms()),
                   [reply = std::move(reply), known = req.known_generation()](const absl::StatusOr<LiveTasks>& v) {
                     proto::LiveTasksResponse r;
                     to_proto(v.status(), r.mutable_status());
                     if (v.ok() && known != 0 && v->change && v->change->from_generation == known &&
                         v->change->payloads_empty) {
                       // The caller holds the previous agreement: only what changed since.
                       r.set_base_generation(known);
                       for (TaskId t : v->change->removed) r.add_removed(t);
                       for (TaskId t : v->change->added) {
                         r.add_added(t);
                         const auto at = std::lower_bound(v->tasks.begin(), v->tasks.end(), t);
                         r.add_added_incarnations(v->incarnations[static_cast<size_t>(at - v->tasks.begin())]);
                       }
                       r.set_generation(v->generation);
                     } else if (v.ok()) {
                       for (TaskId t : v->tasks) r.add_tasks(t);
                       for (Incarnation i : v->incarnations) r.add_incarnations(i);
                       std::string* blob = r.mutable_payload_blob();
                       for (const std::string& p : v->payloads) {
                         blob->append(p);
                         r.add_payload_sizes(static_cast<uint32_t>(p.size()));
                       }
                       r.set_generation(v->generation);
                     }
                     reply(std::move(r));
                   });
}

}  // namespace mcx::distributed
