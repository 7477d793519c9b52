#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {

void to_proto(const absl::Status& s, proto::StatusProto* p);
absl::Status from_proto(const proto::StatusProto& p);

namespace {

void task_to_proto(const TaskInfo& t, proto::TaskInfoProto* p) {
  p->set_id(t.id);
  p->set_incarnation(t.incarnation);
  p->set_state(static_cast<int>(t.state));
  to_proto(t.error, p->mutable_error());
}

TaskInfo task_from_proto(const proto::TaskInfoProto& p) {
  TaskInfo t;
  t.id = p.id();
  t.incarnation = p.incarnation();
  t.state = (p.state() >= 0 && p.state() <= static_cast<int>(TaskState::kShutdown))
                ? static_cast<TaskState>(p.state())
                : TaskState::kError;
  t.error = from_proto(p.error());
  return t;
}

}  // namespace

void to_proto(const absl::Status& s, proto::StatusProto* p) {
  p->set_code(static_cast<int>(s.code()));
  p->set_message(std::string(s.message()));
}

absl::Status from_proto(const proto::StatusProto& p) {
  return absl::Status(static_cast<absl::StatusCode>(p.code()), p.message());
}

void to_proto(const JobState& s, proto::JobStateProto* p) {
  p->set_version(s.version);
  p->set_service_incarnation(s.service_incarnation);
  for (const TaskInfo& t : s.tasks) task_to_proto(t, p->add_tasks());
  to_proto(s.job_error, p->mutable_job_error());
}

JobState from_proto(const proto::JobStateProto& p) {
  JobState s;
  s.version = p.version();
  s.service_incarnation = p.service_incarnation();
  for (const auto& t : p.tasks()) s.tasks.push_back(task_from_proto(t));
  s.job_error = from_proto(p.job_error());
  return s;
}

void to_proto(const ServiceStatus& s, proto::ServiceStatusResponse* p) {
  p->set_service_incarnation(s.service_incarnation);
  p->set_num_tasks(s.num_tasks);
  p->set_recoverable(s.recoverable);
  p->set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(s.heartbeat_timeout));
  p->set_job_state_version(s.job_state_version);
  to_proto(s.job_error, p->mutable_job_error());
  for (const TaskStatus& t : s.tasks) {
    auto* tp = p->add_tasks();
    task_to_proto(t.info, tp->mutable_info());
    tp->set_last_heartbeat_age_ms(t.last_heartbeat_age ? absl::ToInt64Milliseconds(*t.last_heartbeat_age) : -1);
    tp->set_watching(t.watching);
    tp->set_rejoined(t.rejoined);
  }
  for (const BarrierStatus& b : s.barriers) {
    auto* bp = p->add_barriers();
    bp->set_name(b.name);
    bp->set_counter(b.counter);
    for (TaskId t : b.arrived) bp->add_arrived(t);
    for (TaskId t : b.missing) bp->add_missing(t);
    bp->set_age_ms(absl::ToInt64Milliseconds(b.age));
    bp->set_timeout_ms(absl::ToInt64Milliseconds(b.timeout));
  }
  p->set_kv_keys(s.kv_keys);
  p->set_kv_bytes(s.kv_bytes);
  p->set_rebuilt(s.rebuilt);
  p->set_live_set_generation(s.live_set_generation);
}

ServiceStatus from_proto(const proto::ServiceStatusResponse& p) {
  ServiceStatus s;
  s.service_incarnation = p.service_incarnation();
  s.num_tasks = p.num_tasks();
  s.recoverable = p.recoverable();
  s.heartbeat_timeout = absl::Milliseconds(p.heartbeat_timeout_ms());
  s.job_state_version = p.job_state_version();
  s.job_error = from_proto(p.job_error());
  for (const auto& tp : p.tasks()) {
    TaskStatus t;
    t.info = task_from_proto(tp.info());
    if (tp.last_heartbeat_age_ms() >= 0) t.last_heartbeat_age = absl::Milliseconds(tp.last_heartbeat_age_ms());
    t.watching = tp.watching();
    t.rejoined = tp.rejoined();
    s.tasks.push_back(std::move(t));
  }
  for (const auto& bp : p.barriers()) {
    BarrierStatus b;
    b.name = bp.name();
    b.counter = bp.counter();
    b.arrived.assign(bp.arrived().begin(), bp.arrived().end());
    b.missing.assign(bp.missing().begin(), bp.missing().end());
    b.age = absl::Milliseconds(bp.age_ms());
    b.timeout = absl::Milliseconds(bp.timeout_ms());
    s.barriers.push_back(std::move(b));
  }
  s.kv_keys = p.kv_keys();
  s.kv_bytes = p.kv_bytes();
  s.rebuilt = p.rebuilt();
  s.live_set_generation = p.live_set_generation();
  return s;
}

}  // namespace mcx::distributed
