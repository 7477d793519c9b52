#include "mcx/distributed/rpc/proto_client.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

int64_t to_ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

template <typename Response>
absl::Status ProtoCoordinationClient::call(std::string_view api, Rpc rpc, const google::protobuf::MessageLite& request,
                                           Response* response, absl::Duration rpc_timeout, bool wait_for_ready) {
  if (absl::Status s = unary(rpc, api, request, response, rpc_timeout, wait_for_ready); !s.ok()) return s;
  return from_proto(response->status());
}

absl::StatusOr<RegisterResult> ProtoCoordinationClient::register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                             absl::Duration timeout) {
  proto::RegisterRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  req.set_num_tasks(num_tasks);
  req.set_timeout_ms(to_ms(timeout));
  proto::RegisterResponse resp;
  absl::Status s = call("register_task", Rpc::kRegister, req, &resp, timeout + kRpcGrace);
  if (!s.ok()) return s;
  return RegisterResult{resp.service_incarnation()};
}

absl::StatusOr<RegisterResult> ProtoCoordinationClient::rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                           uint64_t live_set_generation,
                                           const std::vector<PassedBarrier>& passed_barriers,
                                           absl::Duration timeout) {
  proto::RegisterRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  req.set_num_tasks(num_tasks);
  req.set_rejoin(true);
  req.set_live_set_generation(live_set_generation);
  for (const PassedBarrier& b : passed_barriers) {
    proto::PassedBarrier* p = req.add_passed_barriers();
    p->set_name(b.name);
    p->set_counter(b.counter);
  }
  proto::RegisterResponse resp;
  // Waits (up to the deadline) for the channel to reconnect to a coordinator that is starting again, instead of
  // failing at once while the channel backs off: the rejoin happens as soon as the connection is up.
  absl::Status s = call("rejoin_task", Rpc::kRegister, req, &resp, timeout,
                        /*wait_for_ready=*/true);
  if (!s.ok()) return s;
  return RegisterResult{resp.service_incarnation()};
}

absl::StatusOr<HeartbeatReply> ProtoCoordinationClient::heartbeat(TaskId task, Incarnation incarnation,
                                                                  absl::Duration timeout) {
  proto::HeartbeatRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  proto::HeartbeatResponse resp;
  absl::Status s = call("heartbeat", Rpc::kHeartbeat, req, &resp, timeout);
  if (!s.ok()) return s;
  // 0: a service that does not send its clock (proto3 default).
  return HeartbeatReply{resp.service_incarnation(), resp.service_clock_us() > 0 ? resp.service_clock_us() : -1};
}

absl::Status ProtoCoordinationClient::report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                          absl::Duration timeout) {
  proto::ReportErrorRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  to_proto(error, req.mutable_error());
  proto::StatusResponse resp;
  return call("report_error", Rpc::kReportError, req, &resp, timeout);
}

absl::Status ProtoCoordinationClient::shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) {
  proto::ShutdownRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  req.set_timeout_ms(to_ms(timeout));
  proto::StatusResponse resp;
  return call("shutdown_task", Rpc::kShutdown, req, &resp, timeout + kRpcGrace);
}

absl::Status ProtoCoordinationClient::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                       absl::Duration timeout) {
  proto::KvInsertRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  req.set_allow_overwrite(allow_overwrite);
  proto::StatusResponse resp;
  return call("kv_insert", Rpc::kKvInsert, req, &resp, timeout);
}

absl::StatusOr<std::string> ProtoCoordinationClient::get(std::string_view key, absl::Duration timeout, bool try_only) {
  proto::KvGetRequest req;
  req.set_key(std::string(key));
  req.set_timeout_ms(to_ms(timeout));
  req.set_try_only(try_only);
  proto::KvGetResponse resp;
  absl::Status s = call(try_only ? "kv_try_get" : "kv_get", Rpc::kKvGet, req,
                          &resp, try_only ? timeout : timeout + kRpcGrace);
  if (!s.ok()) return s;
  return std::move(*resp.mutable_value());
}
absl::StatusOr<std::string> ProtoCoordinationClient::kv_get(std::string_view key, absl::Duration timeout) {
  return get(key, timeout, false);
}
absl::StatusOr<std::string> ProtoCoordinationClient::kv_try_get(std::string_view key, absl::Duration timeout) {
  return get(key, timeout, true);
}

absl::StatusOr<int64_t> ProtoCoordinationClient::kv_increment(std::string_view key, int64_t delta, absl::Duration timeout) {
  proto::KvIncrementRequest req;
  req.set_key(std::string(key));
  req.set_delta(delta);
  proto::KvIncrementResponse resp;
  absl::Status s = call("kv_increment", Rpc::kKvIncrement, req, &resp, timeout);
  if (!s.ok()) return s;
  return resp.value();
}

absl::StatusOr<std::vector<KeyValue>> ProtoCoordinationClient::kv_dir(std::string_view dir, absl::Duration timeout) {
  proto::KvDirRequest req;
  req.set_dir(std::string(dir));
  proto::KvDirResponse resp;
  absl::Status s = call("kv_dir", Rpc::kKvDir, req, &resp, timeout);
  if (!s.ok()) return s;
  std::vector<KeyValue> out;
  out.reserve(resp.entries_size());
  for (auto& e : *resp.mutable_entries()) out.push_back({std::move(*e.mutable_key()), std::move(*e.mutable_value())});
  return out;
}

absl::StatusOr<int64_t> ProtoCoordinationClient::kv_delete(std::string_view key, absl::Duration timeout) {
  proto::KvDeleteRequest req;
  req.set_key(std::string(key));
  proto::KvDeleteResponse resp;
  absl::Status s = call("kv_delete", Rpc::kKvDelete, req, &resp, timeout);
  if (!s.ok()) return s;
  return resp.deleted();
}

absl::Status ProtoCoordinationClient::barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                     const std::vector<TaskId>& tasks, absl::Duration timeout) {
  proto::BarrierRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  req.set_name(std::string(name));
  req.set_counter(counter);
  for (TaskId t : tasks) req.add_tasks(t);
  req.set_timeout_ms(to_ms(timeout));
  proto::StatusResponse resp;
  return call("barrier", Rpc::kBarrier, req, &resp, timeout + kRpcGrace);
}

absl::Status ProtoCoordinationClient::end_job(std::string_view reason, absl::Duration timeout) {
  proto::EndJobRequest req;
  req.set_reason(std::string(reason));
  proto::StatusResponse resp;
  return call("end_job", Rpc::kEndJob, req, &resp, timeout);
}

absl::Status ProtoCoordinationClient::cancel_barrier(std::string_view name, int64_t counter, absl::Duration timeout) {
  proto::CancelBarrierRequest req;
  req.set_name(std::string(name));
  req.set_counter(counter);
  proto::StatusResponse resp;
  return call("cancel_barrier", Rpc::kCancelBarrier, req, &resp, timeout);
}

absl::StatusOr<LiveTasks> ProtoCoordinationClient::get_live_tasks(TaskId task, Incarnation incarnation, const LiveSetRequest& request,
                                         absl::Duration timeout) {
  proto::LiveTasksRequest req;
  req.set_task(task);
  req.set_incarnation(incarnation);
  for (TaskId t : request.tasks) req.add_tasks(t);
  req.set_name(request.name);
  req.set_payload(request.payload);
  req.set_timeout_ms(to_ms(timeout));
  const std::string key = absl::StrCat(request.name, "/", absl::StrJoin(request.tasks, ","));
  {
    MutexLock lock(&live_sets_mu_);
    auto held = held_live_sets_.find(key);
    if (held != held_live_sets_.end()) req.set_known_generation(held->second.generation);
  }
  proto::LiveTasksResponse resp;
  absl::Status s = call("get_live_tasks", Rpc::kLiveTasks, req, &resp, timeout + kRpcGrace);
  if (!s.ok()) return s;
  LiveTasks out;
  out.generation = resp.generation();
  if (resp.base_generation() != 0) {
    // A difference from the agreement this client holds for the key.
    MutexLock lock(&live_sets_mu_);
    auto held = held_live_sets_.find(key);
    if (held == held_live_sets_.end() || held->second.generation != resp.base_generation() ||
        resp.added_size() != resp.added_incarnations_size()) {
      held_live_sets_.erase(key);  // the next call asks for the whole answer
      return absl::UnavailableError(absl::StrCat(
          "[get_live_tasks] the coordination service answered with a difference from live set generation ",
          resp.base_generation(), ", which this process does not hold; call again"));
    }
    std::map<TaskId, Incarnation> members;
    for (size_t i = 0; i < held->second.tasks.size(); ++i) members[held->second.tasks[i]] = held->second.incarnations[i];
    for (TaskId t : resp.removed()) members.erase(t);
    for (int i = 0; i < resp.added_size(); ++i) members[resp.added(i)] = resp.added_incarnations(i);
    for (const auto& [t, inc] : members) {
      out.tasks.push_back(t);
      out.incarnations.push_back(inc);
    }
    out.payloads.assign(out.tasks.size(), std::string());
    held->second = HeldLiveSet{out.generation, out.tasks, out.incarnations};
    return out;
  }
  out.tasks.assign(resp.tasks().begin(), resp.tasks().end());
  out.incarnations.assign(resp.incarnations().begin(), resp.incarnations().end());
  if (resp.payload_sizes_size() != resp.tasks_size()) {
    return absl::InternalError(absl::StrCat("[get_live_tasks] the coordination service answered with ",
                                            resp.tasks_size(), " tasks but ", resp.payload_sizes_size(),
                                            " payloads (a coordinator of another mcx version?)"));
  }
  absl::string_view blob = resp.payload_blob();
  out.payloads.reserve(resp.payload_sizes_size());
  for (uint32_t size : resp.payload_sizes()) {
    if (size > blob.size()) {
      return absl::InternalError(absl::StrCat("[get_live_tasks] the coordination service's answer is malformed: ",
                                              "payload sizes add up to more than the ", resp.payload_blob().size(),
                                              " payload bytes"));
    }
    out.payloads.emplace_back(blob.substr(0, size));
    blob.remove_prefix(size);
  }
  MutexLock lock(&live_sets_mu_);
  held_live_sets_[key] = HeldLiveSet{out.generation, out.tasks, out.incarnations};
  return out;
}

absl::StatusOr<ServiceStatus> ProtoCoordinationClient::status(absl::Duration timeout) {
  proto::ServiceStatusRequest req;
  proto::ServiceStatusResponse resp;
  absl::Status s = call("status", Rpc::kStatus, req, &resp, timeout);
  if (!s.ok()) return s;
  return from_proto(resp);
}

}  // namespace mcx::distributed
