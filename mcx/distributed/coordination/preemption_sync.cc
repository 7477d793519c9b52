#include "mcx/distributed/coordination/preemption_sync.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/job_key_value.h"
#include "mcx/core/logging.h"
#include "mcx/core/process_exit.h"

namespace mcx::distributed {
namespace {

constexpr char kApi[] = "[reached_preemption_sync_point] ";
// After an RPC error other than a timeout (the coordination service is unreachable), the watcher waits this
// long before trying again, so it does not spin.
constexpr absl::Duration kRetryBackoff = absl::Seconds(1);

std::string key(absl::string_view name) { return absl::StrCat(kPreemptionKeyDir, "/", name); }
// In the task's inbox (principal.h): under identity binding any task may write it, only its task delete it.
std::string wake_key_of(TaskId task) { return task_key(task, "inbox/preemption_wake"); }

std::string steps_dir() { return key("steps"); }

// Whether a call that waits inside the service and failed ran out its time. Decided by the clock, without reading
// the status: the service makes its timeout errors on its timer thread, and a status read (or copied) here while
// that thread drops its own copy is reported by ThreadSanitizer, which cannot see absl::Status's reference count
// being released inside the (uninstrumented) abseil library. Errors that come sooner are read as usual.
bool ran_out(absl::Time started, absl::Duration timeout) { return absl::Now() - started >= timeout; }

}  // namespace

PreemptionSync::PreemptionSync(CoordinationAgent* agent, PreemptionSyncOptions options)
    : agent_(agent), task_id_(agent->task_id()), options_(options), wake_key_(wake_key_of(agent->task_id())), timeout_(options.timeout) {}

PreemptionSync::~PreemptionSync() { stop(); }

absl::Status PreemptionSync::notify(const std::string& reason) {
  MutexLock l(&notify_mu_);
  if (notify_closed_) {
    return absl::FailedPreconditionError(
        "[notify_preemption] expected a running preemption sync, found it stopped (mcx::distributed::shutdown)");
  }
  absl::Status s = agent_->kv_insert(key("notice"), reason, /*allow_overwrite=*/false);
  if (absl::IsAlreadyExists(s)) return absl::OkStatus();  // an earlier notice stands; its publisher woke everyone
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("[notify_preemption] cannot publish the preemption notice: ", s.message()));
  }
  log_info("[mcx.preemption] process {} published a preemption notice: {}", agent_->task_id(), reason);
  for (TaskId t = 0; t < agent_->num_tasks(); ++t) {
    // A watcher that misses its wake-up (its key write failed) still finds the notice after one watch slice.
    absl::Status w = agent_->kv_insert(wake_key_of(t), "notice", /*allow_overwrite=*/true);
    if (!w.ok()) log_warn("[mcx.preemption] cannot wake process {}'s preemption watcher: {}", t, w.ToString());
  }
  return absl::OkStatus();
}

void PreemptionSync::set_timeout(absl::Duration timeout) {
  MutexLock l(&mu_);
  timeout_ = timeout;
}

std::optional<std::string> PreemptionSync::notice() const {
  MutexLock l(&mu_);
  return notice_;
}

std::optional<PreemptionSyncPoint> PreemptionSync::sync_point() const {
  MutexLock l(&mu_);
  return sync_;
}

bool PreemptionSync::stopping() const {
  MutexLock l(&mu_);
  return stop_requested_;
}

absl::StatusOr<bool> PreemptionSync::reached_sync_point(int64_t step) {
  MutexLock l(&mu_);
  if (stop_requested_) {
    return absl::FailedPreconditionError(absl::StrCat(
        kApi, "expected a running preemption sync, found it stopped (mcx::distributed::shutdown was called)"));
  }
  if (phase_ == Phase::kFailed) return error_;
  if (last_step_ && step <= *last_step_) {
    return absl::InvalidArgumentError(absl::StrCat(kApi, "expected a step larger than the previous call's (",
                                                   *last_step_, "), got ", step));
  }
  if (phase_ == Phase::kAgreeing) {
    // The agreement uses the last step passed here: none may be passed until it is decided.
    const absl::Time deadline = agreement_deadline_;
    auto decided = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return phase_ != Phase::kAgreeing; };
    if (!mu_.await_until(decided, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          kApi, "expected the preemption agreement to finish by its deadline, found it still running"));
    }
    if (phase_ == Phase::kFailed) return error_;
  }
  const bool first = !last_step_.has_value();
  last_step_ = step;
  if (first && !stop_requested_) watcher_ = std::thread(&PreemptionSync::watch_loop, this);
  if (phase_ != Phase::kAgreed) return false;
  if (step == sync_->step) {
    phase_ = Phase::kReached;
    log_info("[mcx.preemption] process {} reached the preemption sync step {}", agent_->task_id(), step);
    return true;
  }
  if (step > sync_->step) {
    phase_ = Phase::kFailed;
    error_ = absl::FailedPreconditionError(absl::StrCat(
        kApi, "expected a call with step ", sync_->step, " (the agreed preemption sync step) before any later step, got ",
        step, ": steps must grow by one per call, or a process can skip the sync step"));
    return error_;
  }
  return false;
}

absl::StatusOr<std::string> PreemptionSync::read_notice() { return agent_->kv_try_get(key("notice")); }

void PreemptionSync::watch_loop() {
  while (!stopping()) {
    absl::StatusOr<std::string> notice = read_notice();
    absl::Status error;
    if (notice.ok()) {
      agree(*notice);
      return;
    }
    if (absl::IsNotFound(notice.status())) {
      const absl::Time started = absl::Now();
      absl::StatusOr<std::string> woken = agent_->kv_get(wake_key_, options_.watch_slice);
      if (woken.ok()) {
        // Consume the wake-up, then look at the notice again (it was written before the wake-up).
        (void)agent_->kv_delete(wake_key_);
        continue;
      }
      if (ran_out(started, options_.watch_slice)) continue;
      error = woken.status();
    } else {
      error = notice.status();
    }
    log_debug("[mcx.preemption] process {}'s preemption watch failed, retrying in {}: {}", agent_->task_id(),
              absl::FormatDuration(kRetryBackoff), error.ToString());
    MutexLock l(&mu_);
    if (!stop_requested_) retry_cv_.wait_for(&mu_, kRetryBackoff);
  }
}

void PreemptionSync::agree(const std::string& reason) {
  int64_t my_step;
  absl::Duration timeout;
  {
    MutexLock l(&mu_);
    notice_ = reason;
    if (phase_ != Phase::kWatching || !last_step_) return;
    phase_ = Phase::kAgreeing;
    my_step = *last_step_;
    timeout = timeout_;
    // The agreement's own RPC deadline adds the transport's grace; callers wait a little longer than that.
    agreement_deadline_ = absl::Now() + timeout + kRpcGrace + absl::Seconds(1);
  }
  log_info("[mcx.preemption] process {} learned of a preemption notice ({}); agreeing on the sync step (its step: {})",
           agent_->task_id(), reason, my_step);
  absl::StatusOr<PreemptionSyncPoint> point = run_agreement(my_step, timeout);
  if (point.ok()) {
    // For a process that joins after the agreement (a restart): every member writes the same value; the
    // first insert stands (a job-wide key is insert-once for the other tasks under identity binding).
    (void)agent_->kv_insert(key("sync_step"), absl::StrCat(point->step), /*allow_overwrite=*/false);
    log_info("[mcx.preemption] preemption sync step {} agreed by processes {{{}}} (their steps {{{}}})", point->step,
             absl::StrJoin(point->processes, ","), absl::StrJoin(point->steps, ","));
  } else {
    log_warn("[mcx.preemption] {}", point.status().ToString());
  }
  MutexLock l(&mu_);
  if (point.ok()) {
    sync_ = *point;
    phase_ = Phase::kAgreed;
  } else {
    error_ = point.status();
    phase_ = Phase::kFailed;
  }
}

absl::StatusOr<PreemptionSyncPoint> PreemptionSync::run_agreement(int64_t my_step, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  // Reported separately too, so that a timeout can name the live processes that never reported (the
  // agreement's own error names only those absent at the instant this process's call expired).
  if (absl::Status s = agent_->kv_insert(absl::StrCat(steps_dir(), "/", task_id_), absl::StrCat(my_step),
                                      /*allow_overwrite=*/true);
      !s.ok()) {
    log_debug("[mcx.preemption] cannot record process {}'s step: {}", task_id_, s.ToString());
  }
  // In slices, so that stop() need not wait for the whole timeout; the agreement waits for this process only
  // between two slices, which it cannot complete without it anyway.
  while (true) {
    if (stopping()) {
      return absl::CancelledError(absl::StrCat(kApi, "the preemption agreement was cancelled: this process shut down"));
    }
    // An agreement that already finished without this process (it joined late: a restart).
    absl::StatusOr<std::string> agreed = agent_->kv_try_get(key("sync_step"));
    if (agreed.ok()) {
      PreemptionSyncPoint p;
      if (!absl::SimpleAtoi(*agreed, &p.step)) {
        return absl::DataLossError(absl::StrCat(kApi, "malformed sync step '", *agreed, "' in ", key("sync_step")));
      }
      return p;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    LiveSetRequest request;
    request.name = kPreemptionAgreementName;
    request.payload = absl::StrCat(my_step);
    const absl::Duration slice = std::min(left, options_.agreement_slice);
    const absl::Time started = absl::Now();
    absl::StatusOr<LiveTasks> live = agent_->get_live_tasks(request, slice);
    if (live.ok()) {
      PreemptionSyncPoint p;
      p.processes = live->tasks;
      int64_t max_step = my_step;
      for (size_t i = 0; i < live->tasks.size(); ++i) {
        int64_t s;
        const std::string payload = i < live->payloads.size() ? live->payloads[i] : "";
        if (!absl::SimpleAtoi(payload, &s)) {
          return absl::DataLossError(absl::StrCat(kApi, "process ", live->tasks[i], " reported the step '", payload,
                                                  "', which is not an integer"));
        }
        p.steps.push_back(s);
        max_step = std::max(max_step, s);
      }
      p.step = max_step + 1;
      return p;
    }
    if (!ran_out(started, slice)) {
      const absl::Status& e = live.status();
      return absl::Status(e.code(), absl::StrCat(kApi, "the preemption agreement failed: ", e.message()));
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      kApi, "process ", task_id_, " waited ", absl::FormatDuration(timeout),
      " (MCX_PREEMPTION_SYNC_TIMEOUT_S) for every live process to report its step after the preemption notice; ",
      describe_missing(), " (every process must call reached_preemption_sync_point every step)"));
}

std::string PreemptionSync::describe_missing() {
  absl::StatusOr<std::vector<KeyValue>> reported = agent_->kv_dir(steps_dir());
  if (!reported.ok()) return absl::StrCat("some did not (the reports cannot be listed: ", reported.status().message(), ")");
  std::set<std::string> ids;
  for (const KeyValue& kv : *reported) ids.insert(kv.key.substr(kv.key.rfind('/') + 1));
  std::vector<TaskId> missing;
  for (const TaskInfo& t : agent_->last_job_state().tasks) {
    if (t.state == TaskState::kConnected && !ids.count(absl::StrCat(t.id))) missing.push_back(t.id);
  }
  if (missing.empty()) return "each reported, but they were never all in the agreement at once";
  return absl::StrCat(missing.size() == 1 ? "process {" : "processes {", absl::StrJoin(missing, ", "), "} did not");
}

void PreemptionSync::stop() {
  std::thread watcher;
  {
    MutexLock l(&mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
    retry_cv_.signal_all();
    watcher = std::move(watcher_);
  }
  {
    MutexLock l(&notify_mu_);
    notify_closed_ = true;
  }
  if (watcher.joinable()) {
    // Wake the watcher from its wait on its key; it sees the stop request and returns.
    (void)agent_->kv_insert(wake_key_, "stop", /*allow_overwrite=*/true);
    watcher.join();
    (void)agent_->kv_delete(wake_key_);
  }
}

// --- the process-wide instance -------------------------------------------------------------------------------

namespace {

struct Slot {
  Mutex mu;
  CoordinationAgent* agent ABSL_GUARDED_BY(mu) = nullptr;
  std::shared_ptr<PreemptionSync> sync ABSL_GUARDED_BY(mu);
  bool exit_step_registered ABSL_GUARDED_BY(mu) = false;
};

Slot& slot() {
  static Slot* s = new Slot();  // never destroyed: the exit step uses it
  return *s;
}

}  // namespace

void attach_process_preemption_sync(CoordinationAgent* agent) {
  Slot& s = slot();
  MutexLock l(&s.mu);
  s.agent = agent;
  s.sync.reset();
  if (!s.exit_step_registered) {
    s.exit_step_registered = true;
    // A program that exits without mcx::distributed::shutdown: join the watcher before static destructors run.
    run_at_exit(ExitStage::kDataPlane, detach_process_preemption_sync);
  }
}

void detach_process_preemption_sync() {
  std::shared_ptr<PreemptionSync> sync;
  {
    Slot& s = slot();
    MutexLock l(&s.mu);
    sync = std::move(s.sync);
    s.agent = nullptr;
  }
  if (sync) sync->stop();
}

std::shared_ptr<PreemptionSync> process_preemption_sync() {
  Slot& s = slot();
  MutexLock l(&s.mu);
  if (!s.agent) return nullptr;
  if (!s.sync) s.sync = std::make_shared<PreemptionSync>(s.agent);
  return s.sync;
}

}  // namespace mcx::distributed
