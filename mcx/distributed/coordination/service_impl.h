// Private to the coordination service's .cc files: the state behind CoordinationService and helpers.
// Everything here is guarded by Impl::mu; see service.h for the semantics.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/mutex.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {
namespace internal {

// Runs collected actions (callbacks) after the service mutex is released: declare it before the lock.
class Deferred {
 public:
  ~Deferred() {
    for (auto& f : fns_) f();
  }
  void add(std::function<void()> f) { fns_.push_back(std::move(f)); }

 private:
  std::vector<std::function<void()>> fns_;
};

inline std::string fmt_duration(absl::Duration d) {
  // Round to ms so messages stay readable ("1.234s").
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

inline absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline std::string join_ids(const std::vector<TaskId>& ids) { return absl::StrJoin(ids, ", "); }

inline std::string strip_trailing_slashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace internal

using internal::A;
using internal::Deferred;
using internal::fmt_duration;
using internal::join_ids;
using internal::strip_trailing_slashes;

// What one task owns in the key-value store (the per-task quotas of ServiceOptions).
struct KvUsage {
  int64_t keys = 0;
  int64_t bytes = 0;
};

struct CoordinationService::Impl {
  struct Task {
    Incarnation incarnation = 0;
    TaskState state = TaskState::kDisconnected;
    absl::Status error;
    absl::Time last_heartbeat;
    bool ever_registered = false;
    bool rejoined = false;  // came back through rejoin_task (status only)
    int watchers = 0;
  };
  struct RegisterWaiter {
    TaskId task;
    absl::Time deadline;
    absl::Duration timeout;
    Callback<absl::StatusOr<RegisterResult>> done;
  };
  struct Barrier {
    std::string name;
    int64_t counter = 0;
    std::vector<TaskId> participants;  // sorted
    absl::Time start, deadline;
    absl::Duration timeout;
    std::map<TaskId, Callback<absl::Status>> waiting;  // arrived, not yet answered
    std::set<TaskId> arrived;
    bool done = false;
    absl::Status result;
  };
  struct LiveWaiter {
    Incarnation incarnation;
    absl::Time deadline;
    std::string payload;
    Callback<absl::StatusOr<LiveTasks>> done;
  };
  // A live-set agreement is identified by its name and its (sorted) task set.
  using LiveSetKey = std::pair<std::string, std::vector<TaskId>>;
  struct LiveSet {
    std::map<TaskId, LiveWaiter> waiting;
  };
  // The members of the last agreement over a key, and its generation.
  struct AgreedLiveSet {
    std::vector<TaskId> tasks;
    std::vector<Incarnation> incarnations;
    uint64_t generation = 0;
  };
  struct KvWaiter {
    uint64_t id;
    absl::Time deadline;
    Callback<absl::StatusOr<std::string>> done;
  };
  struct Watcher {
    TaskId task;
    Incarnation incarnation;
    Callback<const JobState&> on_state;
    Mutex mu;  // serialises deliveries
    uint64_t delivered ABSL_GUARDED_BY(mu) = 0;
    bool ended ABSL_GUARDED_BY(mu) = false;
    bool first ABSL_GUARDED_BY(mu) = true;
  };

  CoordinationService* self;
  const ServiceOptions& opt;
  const Clock* clock;

  mutable Mutex mu;
  CondVar timer_cv;
  // When the timer thread's current wait ends; InfinitePast while it is not waiting (it recomputes the
  // earliest deadline before it waits again). See wake_timer_for.
  absl::Time timer_wake_at ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::vector<Task> tasks ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 1;
  absl::Status job_error ABSL_GUARDED_BY(mu);
  // Every task has registered at least once (here, or with the coordinator this service replaced: rebuilt).
  bool assembled ABSL_GUARDED_BY(mu) = false;
  // A task rejoined (rejoin_task): this service replaced a lost coordinator; tasks still DISCONNECTED are
  // expected back until rebuilt_at + heartbeat_timeout.
  bool rebuilt ABSL_GUARDED_BY(mu) = false;
  absl::Time rebuilt_at ABSL_GUARDED_BY(mu);
  std::vector<RegisterWaiter> register_waiters ABSL_GUARDED_BY(mu);
  std::map<std::string, Barrier> barriers ABSL_GUARDED_BY(mu);  // newest instance per name
  std::map<LiveSetKey, LiveSet> live_sets ABSL_GUARDED_BY(mu);          // pending agreements
  std::map<LiveSetKey, AgreedLiveSet> agreed_live_sets ABSL_GUARDED_BY(mu);  // the last one per key
  uint64_t live_set_generation ABSL_GUARDED_BY(mu) = 0;                 // job-wide, see LiveTasks::generation
  std::map<std::string, std::string> kv ABSL_GUARDED_BY(mu);
  std::map<std::string, TaskId> kv_owner ABSL_GUARDED_BY(mu);  // keys first written by a task Principal
  std::map<TaskId, KvUsage> kv_usage ABSL_GUARDED_BY(mu);  // what each owner holds (the per-task quotas)
  size_t kv_bytes ABSL_GUARDED_BY(mu) = 0;
  std::map<std::string, std::vector<KvWaiter>> kv_waiters ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  std::map<uint64_t, std::shared_ptr<Watcher>> watchers ABSL_GUARDED_BY(mu);
  std::thread timer;

  Impl(CoordinationService* s, const ServiceOptions& o)
      : self(s), opt(o), clock(o.clock ? o.clock : SystemClock::get()), tasks(o.num_tasks) {}

  // --- helpers (mu held) ---

  absl::Status check_task_id(absl::string_view api, TaskId task) const {
    if (task < 0 || task >= opt.num_tasks) {
      return absl::InvalidArgumentError(
          absl::StrCat("[", api, "] task id ", task, " is outside [0, ", opt.num_tasks, ")"));
    }
    return absl::OkStatus();
  }

  // The caller must be a CONNECTED task with this incarnation.
  absl::Status check_caller(absl::string_view api, TaskId task, Incarnation inc) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    MCX_RETURN_IF_ERROR(check_task_id(api, task));
    if (!opt.recoverable && !job_error.ok()) {
      return absl::AbortedError(absl::StrCat("[", api, "] the job has failed: ", job_error.message()));
    }
    const Task& t = tasks[task];
    if (t.state == TaskState::kDisconnected) {
      return absl::FailedPreconditionError(absl::StrCat("[", api, "] task ", task, " is not registered"));
    }
    if (t.incarnation != inc) {
      return absl::FailedPreconditionError(absl::StrCat(
          "[", api, "] stale incarnation for task ", task, ": the request has ", inc, " but the task is registered with ",
          t.incarnation, " (the process restarted, or another process uses the same task id)"));
    }
    if (t.state == TaskState::kError) {
      return absl::AbortedError(absl::StrCat("[", api, "] task ", task, " has failed: ", t.error.message()));
    }
    if (t.state == TaskState::kShutdown) {
      return absl::FailedPreconditionError(absl::StrCat("[", api, "] task ", task, " has already shut down"));
    }
    return absl::OkStatus();
  }

  absl::Status check_participants(absl::string_view api, const std::vector<TaskId>& ids) const {
    for (TaskId t : ids) MCX_RETURN_IF_ERROR(check_task_id(api, t));
    return absl::OkStatus();
  }

  std::vector<TaskId> resolve_set(std::vector<TaskId> ids) const {
    if (ids.empty()) {
      ids.resize(opt.num_tasks);
      for (int i = 0; i < opt.num_tasks; ++i) ids[i] = i;
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  }

  JobState job_state_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    JobState s;
    s.version = version;
    s.service_incarnation = self->service_incarnation_;
    s.job_error = job_error;
    s.tasks.reserve(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      s.tasks.push_back(TaskInfo{static_cast<TaskId>(i), tasks[i].incarnation, tasks[i].state, tasks[i].error});
    }
    return s;
  }

  // "task 1 (CONNECTED, last heartbeat 0.3s ago)"
  std::string describe_task(TaskId id, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Task& t = tasks[id];
    switch (t.state) {
      case TaskState::kDisconnected: return absl::StrCat("task ", id, " (never registered)");
      case TaskState::kConnected:
        return absl::StrCat("task ", id, " (connected, last heartbeat ", fmt_duration(now - t.last_heartbeat), " ago)");
      case TaskState::kError: return absl::StrCat("task ", id, " (failed: ", t.error.message(), ")");
      case TaskState::kShutdown: return absl::StrCat("task ", id, " (shut down)");
    }
    return "";
  }

  void changed(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++version;
    for (auto& [id, w] : watchers) {
      std::shared_ptr<Watcher> wp = w;
      d.add([this, wp] { deliver(wp); });
    }
  }

  void deliver(const std::shared_ptr<Watcher>& w) {
    MutexLock wl(&w->mu);
    if (w->ended) return;
    JobState s;
    {
      MutexLock lock(&mu);
      s = job_state_locked();
    }
    if (!w->first && s.version <= w->delivered) return;
    w->first = false;
    w->delivered = s.version;
    w->on_state(s);
  }

  void finish_barrier(Barrier& b, absl::Status result, Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    b.done = true;
    b.result = result;
    for (auto& [task, cb] : b.waiting) {
      auto f = std::move(cb);
      d.add([f = std::move(f), result] { f(result); });
    }
    b.waiting.clear();
  }

  // Why barrier `name` cannot pass: participant `task` was declared dead (ABORTED, naming it and its error).
  absl::Status participant_failed(std::string_view name, TaskId task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return absl::AbortedError(absl::StrCat("[barrier] barrier '", std::string(name), "' cannot pass: task ", task,
                                           " has failed: ", tasks[task].error.message()));
  }

  // The tasks a rebuilt service still expects back after the coordinator restarted (see rejoin_task).
  std::vector<TaskId> awaited_after_restart() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<TaskId> out;
    if (!rebuilt) return out;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].state == TaskState::kDisconnected) out.push_back(static_cast<TaskId>(i));
    }
    return out;
  }

  void evaluate_live_sets(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // After a coordinator restart no agreement completes until the membership is rebuilt: a task that has not
    // rejoined yet is live, and its generation floor is not known yet.
    const bool membership_pending = !awaited_after_restart().empty();
    for (auto it = live_sets.begin(); it != live_sets.end();) {
      const std::vector<TaskId>& set = it->first.second;
      LiveSet& ls = it->second;
      // Waiters whose task is no longer live (or restarted) are answered and dropped.
      for (auto w = ls.waiting.begin(); w != ls.waiting.end();) {
        const Task& t = tasks[w->first];
        if (t.state != TaskState::kConnected || t.incarnation != w->second.incarnation) {
          auto f = std::move(w->second.done);
          absl::Status st = absl::AbortedError(
              absl::StrCat("[get_live_tasks] task ", w->first, " is no longer live: ", t.error.message()));
          d.add([f = std::move(f), st] { f(st); });
          w = ls.waiting.erase(w);
        } else {
          ++w;
        }
      }
      bool complete = !ls.waiting.empty() && !membership_pending;
      for (TaskId id : set) {
        if (tasks[id].state == TaskState::kConnected && !ls.waiting.count(id)) complete = false;
      }
      if (complete) {
        LiveTasks result;
        for (auto& [id, w] : ls.waiting) {
          result.tasks.push_back(id);
          result.incarnations.push_back(w.incarnation);
          result.payloads.push_back(std::move(w.payload));
        }
        AgreedLiveSet& last = agreed_live_sets[it->first];
        if (last.generation == 0 || last.tasks != result.tasks || last.incarnations != result.incarnations) {
          last = AgreedLiveSet{result.tasks, result.incarnations, ++live_set_generation};
        }
        result.generation = last.generation;
        auto shared = std::make_shared<const LiveTasks>(std::move(result));  // one copy per waiter, at its call
        for (auto& [id, w] : ls.waiting) {
          auto f = std::move(w.done);
          d.add([f = std::move(f), shared] { f(*shared); });
        }
        it = live_sets.erase(it);
      } else if (ls.waiting.empty()) {
        it = live_sets.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Marks a task failed; propagates in fate-sharing mode.
  void fail_task_locked(TaskId id, absl::Status error, Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Task& t = tasks[id];
    if (t.state == TaskState::kError || t.state == TaskState::kShutdown) return;
    t.state = TaskState::kError;
    t.error = error;
    if (!opt.recoverable) {
      fail_job_locked(absl::Status(error.code(), absl::StrCat("task ", id, " failed: ", error.message())), d);
    } else if (opt.failed_tasks_restart) {
      // Recoverable with restarts: the task leaves its pending barriers; its next incarnation arrives again.
      for (auto& [name, b] : barriers) {
        if (b.done || !b.arrived.count(id)) continue;
        b.arrived.erase(id);
        auto w = b.waiting.find(id);
        if (w != b.waiting.end()) {
          auto f = std::move(w->second);
          b.waiting.erase(w);
          absl::Status st = absl::AbortedError(absl::StrCat("[barrier] task ", id, " failed: ", error.message()));
          d.add([f = std::move(f), st] { f(st); });
        }
      }
    } else {
      // Recoverable: the job goes on, but a pending barrier the task takes part in can no longer pass (the
      // task's calls were its old incarnation's): it fails at once for every participant, naming the task,
      // instead of waiting for it until its deadline.
      for (auto& [name, b] : barriers) {
        if (b.done || !std::binary_search(b.participants.begin(), b.participants.end(), id)) continue;
        finish_barrier(b, participant_failed(name, id), d);
      }
    }
    evaluate_live_sets(d);
    changed(d);
  }

  // The job as a whole failed (a fate-shared task failure, or an admin ended it): the first such error becomes
  // the job error every watcher sees; pending barriers and registrations fail with it. The caller then
  // re-evaluates live sets and publishes the change.
  void fail_job_locked(absl::Status why, Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (job_error.ok()) job_error = std::move(why);
    absl::Status aborted = absl::AbortedError(std::string(job_error.message()));
    for (auto& [name, b] : barriers) {
      if (!b.done) {
        finish_barrier(b, absl::AbortedError(absl::StrCat("[barrier] barrier '", name, "' failed: ",
                                                          job_error.message())),
                       d);
      }
    }
    for (auto& w : register_waiters) {
      auto f = std::move(w.done);
      d.add([f = std::move(f), aborted] { f(absl::AbortedError(absl::StrCat("[register_task] ", aborted.message()))); });
    }
    register_waiters.clear();
  }

  bool all_registered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (const Task& t : tasks) {
      if (!t.ever_registered) return false;
    }
    return true;
  }

  void complete_registration_if_ready(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!assembled) {
      if (!all_registered()) return;
      assembled = true;
    }
    if (!register_waiters.empty()) {
      // The waiting tasks could not heartbeat while blocked in registration: their clocks start now.
      absl::Time now = clock->now();
      for (const auto& w : register_waiters) {
        if (tasks[w.task].state == TaskState::kConnected) tasks[w.task].last_heartbeat = now;
      }
    }
    RegisterResult r{self->service_incarnation_};
    for (auto& w : register_waiters) {
      auto f = std::move(w.done);
      d.add([f = std::move(f), r] { f(r); });
    }
    register_waiters.clear();
  }

  std::vector<TaskId> unregistered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<TaskId> out;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].ever_registered) out.push_back(static_cast<TaskId>(i));
    }
    return out;
  }

  // Instance `counter` of barrier `name` passed on the service this one replaced (rejoin_task): complete it.
  void barrier_passed_locked(const std::string& name, int64_t counter, Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = barriers.find(name);
    if (it != barriers.end() && it->second.counter > counter) return;  // the job is past it already
    if (it != barriers.end() && it->second.counter == counter) {
      if (!it->second.done) finish_barrier(it->second, absl::OkStatus(), d);
      return;
    }
    Barrier b;  // not seen here yet: record it as passed, so its retries are answered at once
    b.name = name;
    b.counter = counter;
    b.done = true;
    b.result = absl::OkStatus();
    barriers.insert_or_assign(name, std::move(b));
  }

  void barrier_arrive(TaskId task, Incarnation inc, std::string_view name_in, int64_t counter,
                      std::vector<TaskId> req_tasks, absl::Duration timeout, Callback<absl::Status> done,
                      Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void timer_loop();
  void check_timeouts_locked(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Time earliest_deadline() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A wait with this deadline was added: wakes the timer thread only if its current wait ends later (a
  // barrier of 64 tasks used to wake it 64 times, each scanning every deadline).
  void wake_timer_for(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline < timer_wake_at) timer_cv.signal();
  }
};

}  // namespace mcx::distributed
