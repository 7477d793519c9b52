// The coordination service's tasks: registration, rejoining after a coordinator restart, heartbeats, failures
// (of a task, and of the whole job), shutdown (service.h, "Tasks").
#include "mcx/distributed/coordination/service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service_format.h"
#include "mcx/distributed/security/principal.h"

namespace mcx::distributed {

void CoordinationService::register_task(TaskId task, Incarnation incarnation, int num_tasks, absl::Duration timeout,
                                        Callback<absl::StatusOr<RegisterResult>> done) {
  ServiceLock lock(&mu_);
  auto reply = [&](absl::Status s) { lock.defer([f = std::move(done), s] { f(s); }); };
  if (num_tasks != options_.num_tasks) {
    return reply(absl::InvalidArgumentError(absl::StrCat(
        "[register_task] task ", task, " says the job has ", num_tasks,
        " processes but the coordination service was started for ", options_.num_tasks)));
  }
  if (absl::Status s = check_task_id("register_task", task); !s.ok()) return reply(s);
  if (incarnation == 0) return reply(absl::InvalidArgumentError("[register_task] incarnation must be non-zero"));
  if (!job_error_.ok()) {  // fate-shared, or ended by an admin (recoverable jobs have no job error otherwise)
    return reply(absl::AbortedError(absl::StrCat("[register_task] the job has failed: ", job_error_.message())));
  }
  metrics_.registrations.with({"register"}).add();
  Task& t = tasks_[task];
  absl::Time now = clock_->now();
  bool same = t.incarnation == incarnation;
  switch (t.state) {
    case TaskState::kConnected:
      if (same) {
        t.last_heartbeat = now;  // a retried registration
        break;
      }
      if (!options_.recoverable) {
        reply(absl::AbortedError(absl::StrCat(
            "[register_task] task ", task, " is already registered by another process (incarnation ", t.incarnation,
            ", this one ", incarnation, "): a duplicate process id, or a restarted process in a job that is not "
            "recoverable")));
        fail_task_locked(task,
                                absl::AbortedError(absl::StrCat(
                                    "another process registered as task ", task,
                                    " (duplicate process id, or a restart the job cannot survive)")),
                                lock);
        return;
      }
      [[fallthrough]];
    case TaskState::kError:
    case TaskState::kShutdown:
      if (t.state != TaskState::kConnected) {
        if (!options_.recoverable) {
          return reply(absl::FailedPreconditionError(absl::StrCat(
              "[register_task] task ", task, t.state == TaskState::kError ? " has failed (" : " has shut down (",
              t.error.message(), ") and the job is not recoverable")));
        }
        if (same) {
          return reply(absl::FailedPreconditionError(absl::StrCat(
              "[register_task] task ", task, " already ", t.state == TaskState::kError ? "failed" : "shut down",
              " with incarnation ", incarnation, "; a restarted process must use a new incarnation")));
        }
      }
      [[fallthrough]];
    case TaskState::kDisconnected:
      t.state = TaskState::kConnected;
      t.incarnation = incarnation;
      t.error = absl::OkStatus();
      t.last_heartbeat = now;
      mark_registered_locked(t);
      t.rejoined = false;
      evaluate_live_sets_locked(lock);
      changed_locked(lock);
      break;
  }
  register_waiters_.push_back({task, now + timeout, timeout, std::move(done)});
  wake_timer_for_locked(now + timeout);
  complete_registration_locked(lock);
}

absl::StatusOr<RegisterResult> CoordinationService::rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                               uint64_t live_set_generation,
                                                               const std::vector<PassedBarrier>& passed_barriers) {
  ServiceLock lock(&mu_);
  if (num_tasks != options_.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat("[rejoin_task] task ", task, " says the job has ", num_tasks,
                                                   " processes but the coordination service was started for ",
                                                   options_.num_tasks));
  }
  MCX_RETURN_IF_ERROR(check_task_id("rejoin_task", task));
  if (incarnation == 0) return absl::InvalidArgumentError("[rejoin_task] incarnation must be non-zero");
  if (!options_.recoverable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[rejoin_task] task ", task, " cannot rejoin: this coordination service is not recoverable (start "
        "mcx-coordinator with --recoverable to let a recoverable job survive a coordinator restart)"));
  }
  metrics_.registrations.with({"rejoin"}).add();
  Task& t = tasks_[task];
  if (t.state == TaskState::kConnected && t.incarnation != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[rejoin_task] task ", task, " cannot rejoin with incarnation ", incarnation,
        ": the coordination service has it connected with incarnation ", t.incarnation,
        ": a restarted process took its place"));
  }
  if (t.state == TaskState::kError || t.state == TaskState::kShutdown) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[rejoin_task] task ", task, " cannot rejoin: the coordination service has it ",
        t.state == TaskState::kError ? absl::StrCat("failed (", t.error.message(), ")") : "shut down",
        "; a restarted process must register with a new incarnation"));
  }
  const absl::Time now = clock_->now();
  live_set_generation_ = std::max(live_set_generation_, live_set_generation);
  for (const PassedBarrier& p : passed_barriers) barrier_passed_locked(p.name, p.counter, lock);
  if (t.state == TaskState::kConnected) {  // a retried rejoin, or the service never went away
    t.last_heartbeat = now;
    return RegisterResult{service_incarnation_};
  }
  t.state = TaskState::kConnected;
  t.incarnation = incarnation;
  t.error = absl::OkStatus();
  t.last_heartbeat = now;
  mark_registered_locked(t);
  t.rejoined = true;
  if (!rebuilt_) {
    rebuilt_ = true;
    rebuilt_at_ = now;
    assembled_ = true;
    timer_cv_.signal();
  }
  complete_registration_locked(lock);  // a restarted task that registered before anyone rejoined
  evaluate_live_sets_locked(lock);
  changed_locked(lock);
  return RegisterResult{service_incarnation_};
}

void CoordinationService::registration_abandoned(TaskId task, Incarnation incarnation) {
  ServiceLock lock(&mu_);
  if (task < 0 || task >= options_.num_tasks) return;
  auto& waiters = register_waiters_;
  const auto waiting = [&](const RegisterWaiter& w) { return w.task == task; };
  if (std::none_of(waiters.begin(), waiters.end(), waiting)) return;  // answered already
  const Task& t = tasks_[task];
  if (t.state != TaskState::kConnected || t.incarnation != incarnation) return;
  waiters.erase(std::remove_if(waiters.begin(), waiters.end(), waiting), waiters.end());
  fail_task_locked(task,
                          absl::UnavailableError(absl::StrCat(
                              "task ", task, " went away while waiting for the other tasks to register (its "
                              "registration call was cancelled: the process died or its connection broke)")),
                          lock);
}

absl::Status CoordinationService::heartbeat(TaskId task, Incarnation incarnation) {
  metrics_.heartbeats.add();
  MutexLock lock(&mu_);
  MCX_RETURN_IF_ERROR(check_caller_locked("heartbeat", task, incarnation));
  tasks_[task].last_heartbeat = clock_->now();
  return absl::OkStatus();
}

absl::Status CoordinationService::report_error(TaskId task, Incarnation incarnation, absl::Status error) {
  ServiceLock lock(&mu_);
  MCX_RETURN_IF_ERROR(check_caller_locked("report_error", task, incarnation));
  if (error.ok()) error = absl::UnknownError("reported an error without a message");
  fail_task_locked(task, absl::Status(error.code(), absl::StrCat("reported an error: ", error.message())), lock);
  return absl::OkStatus();
}

absl::Status CoordinationService::end_job(std::string_view reason, const Caller& caller) {
  const Principal* who = caller.principal();  // nullptr: trusted
  if (who != nullptr && who->role != Role::kAdmin) {
    return absl::PermissionDeniedError(
        absl::StrCat("[authz] ", who->to_string(), " may not end the job: only an admin may"));
  }
  ServiceLock lock(&mu_);
  if (!job_error_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("[end_job] the job has failed already: ", job_error_.message()));
  }
  fail_job_locked(absl::AbortedError(absl::StrCat("the job was ended by ",
                                                         who ? who->to_string() : "an operator", ": ",
                                                         reason.empty() ? "no reason given" : std::string(reason))),
                         lock);
  evaluate_live_sets_locked(lock);
  changed_locked(lock);
  return absl::OkStatus();
}

void CoordinationService::shutdown_task(TaskId task, Incarnation incarnation, Callback<absl::Status> done) {
  ServiceLock lock(&mu_);
  if (absl::Status s = check_caller_locked("shutdown_task", task, incarnation); !s.ok()) {
    lock.defer([f = std::move(done), s] { f(s); });
    return;
  }
  auto leave = [this, task, incarnation](absl::Status s, Callback<absl::Status> f) {
    {
      ServiceLock l2(&mu_);
      Task& t = tasks_[task];
      if (t.incarnation == incarnation && t.state == TaskState::kConnected) {
        t.state = TaskState::kShutdown;
        evaluate_live_sets_locked(l2);
        changed_locked(l2);
      }
    }
    f(s);
  };
  if (options_.recoverable || options_.shutdown_timeout == absl::ZeroDuration()) {
    lock.defer([leave, f = std::move(done)]() mutable { leave(absl::OkStatus(), std::move(f)); });
    return;
  }
  barrier_arrive_locked(task, incarnation, "mcx::shutdown", 0, {}, options_.shutdown_timeout,
                        [leave, f = std::move(done)](absl::Status s) mutable {
                          if (!s.ok()) {
                            s = absl::Status(s.code(), absl::StrCat("[shutdown_task] shutdown barrier failed: ",
                                                                    s.message()));
                          }
                          leave(s, std::move(f));
                        },
                        lock);
}

void CoordinationService::fail_task(TaskId task, absl::Status error) {
  ServiceLock lock(&mu_);
  if (!check_task_id("fail_task", task).ok()) return;
  fail_task_locked(task, std::move(error), lock);
}

// Marks a task failed; propagates in fate-sharing mode.
void CoordinationService::fail_task_locked(TaskId id, absl::Status error, ServiceLock& lock) {
  Task& t = tasks_[id];
  if (t.state == TaskState::kError || t.state == TaskState::kShutdown) return;
  t.state = TaskState::kError;
  t.error = error;
  metrics_.task_failures.add();
  if (!options_.recoverable) {
    fail_job_locked(absl::Status(error.code(), absl::StrCat("task ", id, " failed: ", error.message())), lock);
  } else if (options_.failed_tasks_restart) {
    // Recoverable with restarts: the task leaves its pending barriers; its next incarnation arrives again.
    for (auto& [name, b] : barriers_) {
      if (b.done || !b.arrived.count(id)) continue;
      b.arrived.erase(id);
      auto w = b.waiting.find(id);
      if (w != b.waiting.end()) {
        auto f = std::move(w->second);
        b.waiting.erase(w);
        absl::Status st = absl::AbortedError(absl::StrCat("[barrier] task ", id, " failed: ", error.message()));
        lock.defer([f = std::move(f), st] { f(st); });
      }
    }
  } else {
    // Recoverable: the job goes on, but a pending barrier the task takes part in can no longer pass (the
    // task's calls were its old incarnation's): it fails at once for every participant, naming the task,
    // instead of waiting for it until its deadline.
    for (auto& [name, b] : barriers_) {
      if (b.done || !std::binary_search(b.participants->begin(), b.participants->end(), id)) continue;
      finish_barrier_locked(b, participant_failed_locked(name, id), lock);
    }
  }
  evaluate_live_sets_locked(lock);
  changed_locked(lock);
}

// The job as a whole failed (a fate-shared task failure, or an admin ended it): the first such error becomes
// the job error every watcher sees; pending barriers and registrations fail with it. The caller then
// re-evaluates live sets and publishes the change.
void CoordinationService::fail_job_locked(absl::Status why, ServiceLock& lock) {
  if (job_error_.ok()) {
    metrics_.job_failures.add();
    job_error_ = std::move(why);
  }
  absl::Status aborted = absl::AbortedError(std::string(job_error_.message()));
  for (auto& [name, b] : barriers_) {
    if (!b.done) {
      finish_barrier_locked(b, absl::AbortedError(absl::StrCat("[barrier] barrier '", name, "' failed: ",
                                                        job_error_.message())),
                     lock);
    }
  }
  for (auto& w : register_waiters_) {
    auto f = std::move(w.done);
    lock.defer([f = std::move(f), aborted] { f(absl::AbortedError(absl::StrCat("[register_task] ", aborted.message()))); });
  }
  register_waiters_.clear();
}

void CoordinationService::mark_registered_locked(Task& t) {
  if (!t.ever_registered) ++registered_tasks_;
  t.ever_registered = true;
}

bool CoordinationService::all_registered_locked() const {
  return registered_tasks_ == static_cast<int64_t>(tasks_.size());
}

void CoordinationService::complete_registration_locked(ServiceLock& lock) {
  if (!assembled_) {
    if (!all_registered_locked()) return;
    assembled_ = true;
  }
  if (!register_waiters_.empty()) {
    // The waiting tasks could not heartbeat while blocked in registration: their clocks start now.
    absl::Time now = clock_->now();
    for (const auto& w : register_waiters_) {
      if (tasks_[w.task].state == TaskState::kConnected) tasks_[w.task].last_heartbeat = now;
    }
  }
  RegisterResult r{service_incarnation_};
  for (auto& w : register_waiters_) {
    auto f = std::move(w.done);
    lock.defer([f = std::move(f), r] { f(r); });
  }
  register_waiters_.clear();
}

std::vector<TaskId> CoordinationService::unregistered_locked() const {
  std::vector<TaskId> out;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (!tasks_[i].ever_registered) out.push_back(static_cast<TaskId>(i));
  }
  return out;
}

// The tasks a rebuilt service still expects back after the coordinator restarted (see rejoin_task).
std::vector<TaskId> CoordinationService::awaited_after_restart_locked() const {
  std::vector<TaskId> out;
  if (!rebuilt_) return out;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (tasks_[i].state == TaskState::kDisconnected) out.push_back(static_cast<TaskId>(i));
  }
  return out;
}

// Fails the tasks whose heartbeats stopped (or that did not come back after a coordinator restart) and
// ends the registrations past their deadline.
void CoordinationService::expire_tasks_locked(absl::Time now, ServiceLock& lock) {
  // Heartbeats. Not while the job is still assembling: registered tasks wait in registration without
  // heartbeating (their registration deadline bounds that wait).
  for (size_t i = 0; i < tasks_.size() && assembled_; ++i) {
    Task& t = tasks_[i];
    if (t.state == TaskState::kConnected && now - t.last_heartbeat > options_.heartbeat_timeout) {
      metrics_.heartbeats_missed.add();
      fail_task_locked(static_cast<TaskId>(i),
                       absl::UnavailableError(absl::StrCat(
                           "task ", i, " stopped sending heartbeats (last one ", fmt_duration(now - t.last_heartbeat),
                           " ago; heartbeat timeout ", fmt_duration(options_.heartbeat_timeout), ")")),
                       lock);
    }
  }
  // After a coordinator restart: the tasks that did not come back within the grace.
  if (rebuilt_ && now - rebuilt_at_ > options_.heartbeat_timeout) {
    for (TaskId id : awaited_after_restart_locked()) {
      fail_task_locked(id,
                       absl::UnavailableError(absl::StrCat(
                           "task ", id, " did not come back after the coordinator restarted (no rejoin or registration "
                           "within ", fmt_duration(options_.heartbeat_timeout), " of the first task's rejoin)")),
                       lock);
    }
  }
  // Registration.
  for (auto it = register_waiters_.begin(); it != register_waiters_.end();) {
    if (it->deadline <= now) {
      std::vector<TaskId> missing = unregistered_locked();
      absl::Status st = absl::DeadlineExceededError(absl::StrCat(
          "[register_task] task ", it->task, " waited ", fmt_duration(it->timeout),
          " for all tasks to register; ", options_.num_tasks - missing.size(), " of ", options_.num_tasks,
          " registered; missing task ids: ", join_ids(missing)));
      auto f = std::move(it->done);
      lock.defer([f = std::move(f), st] { f(st); });
      it = register_waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace mcx::distributed
