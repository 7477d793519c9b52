#include "mcx/distributed/rpc/proto_convert.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mcx::distributed {
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

void to_proto(const JobStateSnapshot& snapshot, uint64_t since, proto::JobStateProto* p) {
  const JobState& s = snapshot.state();
  p->set_version(s.version);
  p->set_service_incarnation(s.service_incarnation);
  to_proto(s.job_error, p->mutable_job_error());
  if (std::optional<std::vector<TaskId>> changed = snapshot.changed_since(since)) {
    p->set_base_version(since);
    for (TaskId id : *changed) task_to_proto(s.tasks[static_cast<size_t>(id)], p->add_tasks());
    return;
  }
  std::string* states = p->mutable_states();
  states->reserve(s.tasks.size());
  p->mutable_incarnations()->Reserve(static_cast<int>(s.tasks.size()));
  for (const TaskInfo& t : s.tasks) {
    states->push_back(static_cast<char>(t.state));
    p->add_incarnations(t.incarnation);
    if (!t.error.ok()) task_to_proto(t, p->add_tasks());
  }
}

absl::Status apply_proto(const proto::JobStateProto& p, JobState* state) {
  if (p.base_version() == 0) {
    const size_t n = p.states().size();
    if (static_cast<size_t>(p.incarnations_size()) != n) {
      return absl::DataLossError(absl::StrCat("[watch] a whole job state of ", n, " task states and ",
                                              p.incarnations_size(), " incarnations"));
    }
    JobState whole;
    whole.tasks.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int state = static_cast<unsigned char>(p.states()[i]);
      TaskInfo& t = whole.tasks[i];
      t.id = static_cast<TaskId>(i);
      t.incarnation = p.incarnations(static_cast<int>(i));
      t.state = state <= static_cast<int>(TaskState::kShutdown) ? static_cast<TaskState>(state) : TaskState::kError;
    }
    for (const auto& t : p.tasks()) {  // the tasks with an error
      if (t.id() < 0 || static_cast<size_t>(t.id()) >= n) {
        return absl::DataLossError(absl::StrCat("[watch] a whole job state of ", n, " tasks names task ", t.id()));
      }
      whole.tasks[static_cast<size_t>(t.id())] = task_from_proto(t);
    }
    whole.version = p.version();
    whole.service_incarnation = p.service_incarnation();
    whole.job_error = from_proto(p.job_error());
    *state = std::move(whole);
    return absl::OkStatus();
  }
  if (p.base_version() != state->version || p.service_incarnation() != state->service_incarnation) {
    return absl::DataLossError(absl::StrCat("[watch] a job state change from version ", p.base_version(),
                                            " of coordinator incarnation ", p.service_incarnation(),
                                            ", but this stream holds version ", state->version, " of incarnation ",
                                            state->service_incarnation));
  }
  for (const auto& t : p.tasks()) {
    if (t.id() < 0 || static_cast<size_t>(t.id()) >= state->tasks.size()) {
      return absl::DataLossError(absl::StrCat("[watch] a job state change names task ", t.id(), " of a job of ",
                                              state->tasks.size()));
    }
  }
  for (const auto& t : p.tasks()) state->tasks[static_cast<size_t>(t.id())] = task_from_proto(t);
  state->version = p.version();
  state->job_error = from_proto(p.job_error());
  return absl::OkStatus();
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
