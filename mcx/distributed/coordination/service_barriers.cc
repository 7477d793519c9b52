// The coordination service's named barriers (service.h, "Barriers").
#include "mcx/distributed/coordination/service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service_format.h"
#include "mcx/distributed/security/principal.h"

namespace mcx::distributed {

void CoordinationService::barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                                  std::vector<TaskId> participants, absl::Duration timeout, Callback<absl::Status> done) {
  ServiceLock lock(&mu_);
  if (name == "mcx::shutdown") {
    lock.defer([f = std::move(done)] {
      f(absl::InvalidArgumentError("[barrier] the name 'mcx::shutdown' is reserved for the shutdown barrier"));
    });
    return;
  }
  barrier_arrive_locked(task, incarnation, name, counter, std::move(participants), timeout, std::move(done), lock);
}

absl::Status CoordinationService::cancel_barrier(std::string_view name_in, int64_t counter, const Caller& caller) {
  const Principal* who = caller.principal();  // nullptr: trusted
  ServiceLock lock(&mu_);
  std::string name(name_in);
  auto it = barriers_.find(name);
  if (who != nullptr && who->role != Role::kAdmin) {
    const bool in_flight_with_caller = who->role == Role::kTask && it != barriers_.end() &&
                                       it->second.counter == counter && !it->second.done &&
                                       std::binary_search(it->second.participants->begin(),
                                                          it->second.participants->end(), who->task);
    if (!in_flight_with_caller) {
      return absl::PermissionDeniedError(absl::StrCat(
          "[authz] ", who->to_string(), " may not cancel barrier '", name, "' (instance ", counter,
          "): a task may cancel only an instance in flight that it takes part in; an admin may cancel any"));
    }
  }
  absl::Status cancelled =
      absl::CancelledError(absl::StrCat("[barrier] barrier '", name, "' (instance ", counter, ") was cancelled"));
  if (it != barriers_.end() && it->second.counter == counter) {
    if (it->second.done) {
      return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "' (instance ", counter,
                                                        ") already finished: ", it->second.result.ToString()));
    }
    finish_barrier_locked(it->second, cancelled, lock);
    return absl::OkStatus();
  }
  if (it != barriers_.end() && counter < it->second.counter) {
    return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "': instance ", counter,
                                                      " is older than the current instance ", it->second.counter));
  }
  if (it != barriers_.end() && !it->second.done) {
    return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "': instance ",
                                                      it->second.counter, " is still in flight"));
  }
  // A future instance: create it already cancelled, so its calls get CANCELLED.
  Barrier b;
  b.name = name;
  b.counter = counter;
  b.done = true;
  b.result = cancelled;
  barriers_.insert_or_assign(name, std::move(b));
  return absl::OkStatus();
}

void CoordinationService::barrier_arrive_locked(TaskId task, Incarnation inc, std::string_view name_in,
                                               int64_t counter, std::vector<TaskId> req_tasks,
                                               absl::Duration timeout, Callback<absl::Status> done, ServiceLock& lock) {
  std::string name(name_in);
  auto reply = [&lock, &done](absl::Status s) { lock.defer([f = std::move(done), s] { f(s); }); };
  if (absl::Status s = check_caller_locked("barrier", task, inc); !s.ok()) return reply(s);
  if (absl::Status s = check_participants("barrier", req_tasks); !s.ok()) return reply(s);
  if (timeout <= absl::ZeroDuration()) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("[barrier] barrier '", name, "': timeout must be positive, got ", fmt_duration(timeout))));
  }
  const TaskSet set = resolve_set(std::move(req_tasks));
  absl::Time now = clock_->now();
  auto it = barriers_.find(name);
  if (it != barriers_.end() && counter < it->second.counter) {
    return reply(absl::FailedPreconditionError(absl::StrCat(
        "[barrier] barrier '", name, "': task ", task, " asked for instance ", counter, " but instance ",
        it->second.counter, " already started (a restarted task, or barrier calls out of step across tasks)")));
  }
  if (it == barriers_.end() || counter > it->second.counter) {
    if (it != barriers_.end() && !it->second.done) {
      return reply(absl::FailedPreconditionError(absl::StrCat(
          "[barrier] barrier '", name, "': task ", task, " asked for instance ", counter, " while instance ",
          it->second.counter, " is still in flight (tasks call this barrier a different number of times; use "
          "distinct names for barriers over different task subsets)")));
    }
    Barrier b;
    b.name = name;
    b.counter = counter;
    b.participants = set;
    b.start = now;
    b.timeout = timeout;
    b.deadline = now + timeout;
    it = barriers_.insert_or_assign(name, std::move(b)).first;
    wake_timer_for_locked(now + timeout);
    // A participant the service already declared dead can never arrive (a restarted task registers as
    // CONNECTED again before it calls): fail at once instead of at the deadline, unless restarts are expected.
    for (TaskId p : *set) {
      if (tasks_[p].state == TaskState::kError && !(options_.recoverable && options_.failed_tasks_restart)) {
        it->second.waiting[task] = std::move(done);
        finish_barrier_locked(it->second, participant_failed_locked(name, p), lock);
        return;
      }
    }
  }
  Barrier& b = it->second;
  if (b.done) return reply(b.result);
  if (!same_tasks(set, b.participants)) {
    b.waiting[task] = std::move(done);
    finish_barrier_locked(b,
                   absl::InvalidArgumentError(absl::StrCat(
                       "[barrier] barrier '", name, "': task ", task, " named participants {", join_ids(*set),
                       "} but the first arrival named {", join_ids(*b.participants), "}")),
                   lock);
    return;
  }
  if (!std::binary_search(set->begin(), set->end(), task)) {
    b.waiting[task] = std::move(done);
    finish_barrier_locked(b,
                   absl::InvalidArgumentError(absl::StrCat("[barrier] barrier '", name, "': task ", task,
                                                           " is not one of its participants {", join_ids(*set), "}")),
                   lock);
    return;
  }
  auto w = b.waiting.find(task);
  if (w != b.waiting.end()) {  // repeated call (retry): the older one is superseded
    auto f = std::move(w->second);
    lock.defer([f = std::move(f), name] {
      f(absl::CancelledError(absl::StrCat("[barrier] barrier '", name, "': superseded by a repeated call")));
    });
  }
  b.waiting[task] = std::move(done);
  b.arrived.insert(task);
  if (b.arrived.size() == b.participants->size()) finish_barrier_locked(b, absl::OkStatus(), lock);
}

void CoordinationService::finish_barrier_locked(Barrier& b, absl::Status result, ServiceLock& lock) {
  metrics_.barriers.with({result.ok() ? std::string("ok") : absl::StatusCodeToString(result.code())}).add();
  metrics_.barrier_seconds.observe(absl::ToDoubleSeconds(clock_->now() - b.start));
  b.done = true;
  b.result = result;
  for (auto& [task, cb] : b.waiting) {
    auto f = std::move(cb);
    lock.defer([f = std::move(f), result] { f(result); });
  }
  b.waiting.clear();
}

// Why barrier `name` cannot pass: participant `task` was declared dead (ABORTED, naming it and its error).
absl::Status CoordinationService::participant_failed_locked(std::string_view name, TaskId task) const {
  return absl::AbortedError(absl::StrCat("[barrier] barrier '", std::string(name), "' cannot pass: task ", task,
                                         " has failed: ", tasks_[task].error.message()));
}

// Instance `counter` of barrier `name` passed on the service this one replaced (rejoin_task): complete it.
void CoordinationService::barrier_passed_locked(const std::string& name, int64_t counter, ServiceLock& lock) {
  auto it = barriers_.find(name);
  if (it != barriers_.end() && it->second.counter > counter) return;  // the job is past it already
  if (it != barriers_.end() && it->second.counter == counter) {
    if (!it->second.done) finish_barrier_locked(it->second, absl::OkStatus(), lock);
    return;
  }
  Barrier b;  // not seen here yet: record it as passed, so its retries are answered at once
  b.name = name;
  b.counter = counter;
  b.done = true;
  b.result = absl::OkStatus();
  barriers_.insert_or_assign(name, std::move(b));
}

// Fails the barriers past their deadline, naming the tasks that did not arrive.
void CoordinationService::expire_barriers_locked(absl::Time now, ServiceLock& lock) {
  for (auto& [name, b] : barriers_) {
    if (b.done || b.deadline > now) continue;
    std::vector<std::string> missing;
    for (TaskId p : *b.participants) {
      if (!b.arrived.count(p)) missing.push_back(describe_task_locked(p, now));
    }
    finish_barrier_locked(b,
                   absl::DeadlineExceededError(absl::StrCat(
                       "[barrier] barrier '", name, "' (instance ", b.counter, ") timed out after ",
                       fmt_duration(b.timeout), ": ", b.arrived.size(), " of ", b.participants->size(),
                       " tasks arrived; missing: ", absl::StrJoin(missing, ", "))),
                   lock);
  }
}

}  // namespace mcx::distributed
