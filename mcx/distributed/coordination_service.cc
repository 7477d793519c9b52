#include "mcx/distributed/coordination_service.h"

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"

namespace mcx::distributed {
namespace {

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

std::string fmt_duration(absl::Duration d) {
  // Round to ms so messages stay readable ("1.234s").
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string join_ids(const std::vector<TaskId>& ids) { return absl::StrJoin(ids, ", "); }

std::string strip_trailing_slashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

Incarnation random_incarnation() {
  static thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(std::hash<std::thread::id>()(std::this_thread::get_id()));
  }());
  Incarnation v = 0;
  while (v == 0) v = gen();
  return v;
}

SystemClock* SystemClock::get() {
  static SystemClock* c = new SystemClock();
  return c;
}

absl::Time ManualClock::now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void ManualClock::advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

const char* task_state_name(TaskState s) {
  switch (s) {
    case TaskState::kDisconnected: return "DISCONNECTED";
    case TaskState::kConnected: return "CONNECTED";
    case TaskState::kError: return "ERROR";
    case TaskState::kShutdown: return "SHUTDOWN";
  }
  return "?";
}

// ------------------------------------------------------------------------------------------------------
struct CoordinationService::Impl {
  struct Task {
    Incarnation incarnation = 0;
    TaskState state = TaskState::kDisconnected;
    absl::Status error;
    absl::Time last_heartbeat;
    bool ever_registered = false;
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
    Callback<absl::StatusOr<LiveTasks>> done;
  };
  struct LiveSet {
    std::map<TaskId, LiveWaiter> waiting;
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
    absl::Mutex mu;  // serialises deliveries
    uint64_t delivered ABSL_GUARDED_BY(mu) = 0;
    bool ended ABSL_GUARDED_BY(mu) = false;
    bool first ABSL_GUARDED_BY(mu) = true;
  };

  CoordinationService* self;
  const ServiceOptions& opt;
  const Clock* clock;

  mutable absl::Mutex mu;
  absl::CondVar timer_cv;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::vector<Task> tasks ABSL_GUARDED_BY(mu);
  uint64_t version ABSL_GUARDED_BY(mu) = 1;
  absl::Status job_error ABSL_GUARDED_BY(mu);
  std::vector<RegisterWaiter> register_waiters ABSL_GUARDED_BY(mu);
  std::map<std::string, Barrier> barriers ABSL_GUARDED_BY(mu);  // newest instance per name
  std::map<std::vector<TaskId>, LiveSet> live_sets ABSL_GUARDED_BY(mu);
  std::map<std::string, std::string> kv ABSL_GUARDED_BY(mu);
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
    absl::MutexLock wl(&w->mu);
    if (w->ended) return;
    JobState s;
    {
      absl::MutexLock lock(&mu);
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

  void evaluate_live_sets(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (auto it = live_sets.begin(); it != live_sets.end();) {
      const std::vector<TaskId>& set = it->first;
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
      bool complete = !ls.waiting.empty();
      for (TaskId id : set) {
        if (tasks[id].state == TaskState::kConnected && !ls.waiting.count(id)) complete = false;
      }
      if (complete) {
        LiveTasks result;
        for (auto& [id, w] : ls.waiting) {
          result.tasks.push_back(id);
          result.incarnations.push_back(w.incarnation);
        }
        for (auto& [id, w] : ls.waiting) {
          auto f = std::move(w.done);
          d.add([f = std::move(f), result] { f(result); });
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
      if (job_error.ok()) {
        job_error = absl::Status(error.code(), absl::StrCat("task ", id, " failed: ", error.message()));
      }
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
    } else {
      // Recoverable: the task leaves its pending barriers (it may come back before their deadlines).
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
    }
    evaluate_live_sets(d);
    changed(d);
  }

  bool all_registered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (const Task& t : tasks) {
      if (!t.ever_registered) return false;
    }
    return true;
  }

  void complete_registration_if_ready(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!all_registered()) return;
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

  void barrier_arrive(TaskId task, Incarnation inc, std::string_view name_in, int64_t counter,
                      std::vector<TaskId> req_tasks, absl::Duration timeout, Callback<absl::Status> done,
                      Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void timer_loop();
  void check_timeouts_locked(Deferred& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Time earliest_deadline() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

void CoordinationService::Impl::barrier_arrive(TaskId task, Incarnation inc, std::string_view name_in,
                                               int64_t counter, std::vector<TaskId> req_tasks,
                                               absl::Duration timeout, Callback<absl::Status> done, Deferred& d) {
  std::string name(name_in);
  auto reply = [&d, &done](absl::Status s) { d.add([f = std::move(done), s] { f(s); }); };
  if (absl::Status s = check_caller("barrier", task, inc); !s.ok()) return reply(s);
  if (absl::Status s = check_participants("barrier", req_tasks); !s.ok()) return reply(s);
  if (timeout <= absl::ZeroDuration()) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("[barrier] barrier '", name, "': timeout must be positive, got ", fmt_duration(timeout))));
  }
  std::vector<TaskId> set = resolve_set(std::move(req_tasks));
  absl::Time now = clock->now();
  auto it = barriers.find(name);
  if (it != barriers.end() && counter < it->second.counter) {
    return reply(absl::FailedPreconditionError(absl::StrCat(
        "[barrier] barrier '", name, "': task ", task, " asked for instance ", counter, " but instance ",
        it->second.counter, " already started (a restarted task, or barrier calls out of step across tasks)")));
  }
  if (it == barriers.end() || counter > it->second.counter) {
    if (it != barriers.end() && !it->second.done) {
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
    it = barriers.insert_or_assign(name, std::move(b)).first;
    timer_cv.Signal();
    if (!opt.recoverable) {
      for (TaskId p : set) {
        if (tasks[p].state == TaskState::kError) {
          it->second.waiting[task] = std::move(done);
          finish_barrier(it->second,
                         absl::AbortedError(absl::StrCat("[barrier] barrier '", name, "' cannot pass: task ", p,
                                                         " has failed: ", tasks[p].error.message())),
                         d);
          return;
        }
      }
    }
  }
  Barrier& b = it->second;
  if (b.done) return reply(b.result);
  if (set != b.participants) {
    b.waiting[task] = std::move(done);
    finish_barrier(b,
                   absl::InvalidArgumentError(absl::StrCat(
                       "[barrier] barrier '", name, "': task ", task, " named participants {", join_ids(set),
                       "} but the first arrival named {", join_ids(b.participants), "}")),
                   d);
    return;
  }
  if (!std::binary_search(set.begin(), set.end(), task)) {
    b.waiting[task] = std::move(done);
    finish_barrier(b,
                   absl::InvalidArgumentError(absl::StrCat("[barrier] barrier '", name, "': task ", task,
                                                           " is not one of its participants {", join_ids(set), "}")),
                   d);
    return;
  }
  auto w = b.waiting.find(task);
  if (w != b.waiting.end()) {  // repeated call (retry): the older one is superseded
    auto f = std::move(w->second);
    d.add([f = std::move(f), name] {
      f(absl::CancelledError(absl::StrCat("[barrier] barrier '", name, "': superseded by a repeated call")));
    });
  }
  b.waiting[task] = std::move(done);
  b.arrived.insert(task);
  if (b.arrived.size() == b.participants.size()) finish_barrier(b, absl::OkStatus(), d);
}

absl::Time CoordinationService::Impl::earliest_deadline() const {
  absl::Time t = absl::InfiniteFuture();
  for (const auto& w : register_waiters) t = std::min(t, w.deadline);
  for (const auto& [n, b] : barriers) {
    if (!b.done) t = std::min(t, b.deadline);
  }
  for (const auto& [s, ls] : live_sets) {
    for (const auto& [id, w] : ls.waiting) t = std::min(t, w.deadline);
  }
  for (const auto& [k, ws] : kv_waiters) {
    for (const auto& w : ws) t = std::min(t, w.deadline);
  }
  return t;
}

void CoordinationService::Impl::check_timeouts_locked(Deferred& d) {
  absl::Time now = clock->now();
  // Heartbeats. Not while the job is still assembling: registered tasks wait in registration without
  // heartbeating (their registration deadline bounds that wait).
  const bool assembled = all_registered();
  for (size_t i = 0; i < tasks.size() && assembled; ++i) {
    Task& t = tasks[i];
    if (t.state == TaskState::kConnected && now - t.last_heartbeat > opt.heartbeat_timeout) {
      fail_task_locked(static_cast<TaskId>(i),
                       absl::UnavailableError(absl::StrCat(
                           "task ", i, " stopped sending heartbeats (last one ", fmt_duration(now - t.last_heartbeat),
                           " ago; heartbeat timeout ", fmt_duration(opt.heartbeat_timeout), ")")),
                       d);
    }
  }
  // Registration.
  for (auto it = register_waiters.begin(); it != register_waiters.end();) {
    if (it->deadline <= now) {
      std::vector<TaskId> missing = unregistered();
      absl::Status st = absl::DeadlineExceededError(absl::StrCat(
          "[register_task] task ", it->task, " waited ", fmt_duration(it->timeout),
          " for all tasks to register; ", opt.num_tasks - missing.size(), " of ", opt.num_tasks,
          " registered; missing task ids: ", join_ids(missing)));
      auto f = std::move(it->done);
      d.add([f = std::move(f), st] { f(st); });
      it = register_waiters.erase(it);
    } else {
      ++it;
    }
  }
  // Barriers.
  for (auto& [name, b] : barriers) {
    if (b.done || b.deadline > now) continue;
    std::vector<std::string> missing;
    for (TaskId p : b.participants) {
      if (!b.arrived.count(p)) missing.push_back(describe_task(p, now));
    }
    finish_barrier(b,
                   absl::DeadlineExceededError(absl::StrCat(
                       "[barrier] barrier '", name, "' (instance ", b.counter, ") timed out after ",
                       fmt_duration(b.timeout), ": ", b.arrived.size(), " of ", b.participants.size(),
                       " tasks arrived; missing: ", absl::StrJoin(missing, ", "))),
                   d);
  }
  // Live sets.
  for (auto it = live_sets.begin(); it != live_sets.end();) {
    LiveSet& ls = it->second;
    for (auto w = ls.waiting.begin(); w != ls.waiting.end();) {
      if (w->second.deadline > now) {
        ++w;
        continue;
      }
      std::vector<TaskId> missing;
      for (TaskId id : it->first) {
        if (tasks[id].state == TaskState::kConnected && !ls.waiting.count(id)) missing.push_back(id);
      }
      absl::Status st = absl::DeadlineExceededError(
          absl::StrCat("[get_live_tasks] task ", w->first, " timed out waiting for the live tasks {",
                       join_ids(missing), "} of {", join_ids(it->first), "} to call get_live_tasks"));
      auto f = std::move(w->second.done);
      d.add([f = std::move(f), st] { f(st); });
      w = ls.waiting.erase(w);
    }
    if (ls.waiting.empty()) {
      it = live_sets.erase(it);
    } else {
      ++it;
    }
  }
  // KV gets.
  for (auto it = kv_waiters.begin(); it != kv_waiters.end();) {
    auto& ws = it->second;
    for (auto w = ws.begin(); w != ws.end();) {
      if (w->deadline <= now) {
        absl::Status st = absl::DeadlineExceededError(
            absl::StrCat("[kv_get] key '", it->first, "' was not set within the timeout"));
        auto f = std::move(w->done);
        d.add([f = std::move(f), st] { f(st); });
        w = ws.erase(w);
      } else {
        ++w;
      }
    }
    if (ws.empty()) {
      it = kv_waiters.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinationService::Impl::timer_loop() {
  absl::Duration tick = std::min(absl::Milliseconds(100), opt.heartbeat_timeout / 10);
  while (true) {
    Deferred d;
    absl::MutexLock lock(&mu);
    if (stopping) return;
    absl::Time now = clock->now();
    absl::Duration wait = std::min(tick, earliest_deadline() - now);
    if (wait > absl::ZeroDuration()) timer_cv.WaitWithTimeout(&mu, wait);
    if (stopping) return;
    check_timeouts_locked(d);
  }
}

// ------------------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::create(ServiceOptions options) {
  if (options.num_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[CoordinationService] num_tasks must be >= 1, got ", options.num_tasks));
  }
  if (options.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("[CoordinationService] heartbeat_timeout must be positive, got ",
                                                   fmt_duration(options.heartbeat_timeout)));
  }
  if (options.shutdown_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("[CoordinationService] shutdown_timeout must not be negative");
  }
  std::unique_ptr<CoordinationService> s(new CoordinationService(std::move(options)));
  if (s->options_.start_timer_thread) {
    s->impl_->timer = std::thread([impl = s->impl_.get()] { impl->timer_loop(); });
  }
  return s;
}

CoordinationService::CoordinationService(ServiceOptions options)
    : options_(std::move(options)), service_incarnation_(random_incarnation()),
      impl_(std::make_unique<Impl>(this, options_)) {}

CoordinationService::~CoordinationService() {
  {
    Deferred d;
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
    impl_->timer_cv.SignalAll();
    absl::Status st = absl::AbortedError("[coordination] the coordination service is stopping");
    for (auto& w : impl_->register_waiters) d.add([f = std::move(w.done), st] { f(st); });
    impl_->register_waiters.clear();
    for (auto& [n, b] : impl_->barriers) {
      if (!b.done) impl_->finish_barrier(b, st, d);
    }
    for (auto& [s, ls] : impl_->live_sets) {
      for (auto& [id, w] : ls.waiting) d.add([f = std::move(w.done), st] { f(st); });
    }
    impl_->live_sets.clear();
    for (auto& [k, ws] : impl_->kv_waiters) {
      for (auto& w : ws) d.add([f = std::move(w.done), st] { f(st); });
    }
    impl_->kv_waiters.clear();
  }
  if (impl_->timer.joinable()) impl_->timer.join();
}

void CoordinationService::register_task(TaskId task, Incarnation incarnation, int num_tasks, absl::Duration timeout,
                                        Callback<absl::StatusOr<RegisterResult>> done) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  auto reply = [&](absl::Status s) { d.add([f = std::move(done), s] { f(s); }); };
  if (num_tasks != options_.num_tasks) {
    return reply(absl::InvalidArgumentError(absl::StrCat(
        "[register_task] task ", task, " says the job has ", num_tasks,
        " processes but the coordination service was started for ", options_.num_tasks)));
  }
  if (absl::Status s = impl_->check_task_id("register_task", task); !s.ok()) return reply(s);
  if (incarnation == 0) return reply(absl::InvalidArgumentError("[register_task] incarnation must be non-zero"));
  if (!options_.recoverable && !impl_->job_error.ok()) {
    return reply(absl::AbortedError(absl::StrCat("[register_task] the job has failed: ", impl_->job_error.message())));
  }
  Impl::Task& t = impl_->tasks[task];
  absl::Time now = impl_->clock->now();
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
        impl_->fail_task_locked(task,
                                absl::AbortedError(absl::StrCat(
                                    "another process registered as task ", task,
                                    " (duplicate process id, or a restart the job cannot survive)")),
                                d);
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
      t.ever_registered = true;
      impl_->evaluate_live_sets(d);
      impl_->changed(d);
      break;
  }
  impl_->register_waiters.push_back({task, now + timeout, timeout, std::move(done)});
  impl_->timer_cv.Signal();
  impl_->complete_registration_if_ready(d);
}

absl::Status CoordinationService::heartbeat(TaskId task, Incarnation incarnation) {
  absl::MutexLock lock(&impl_->mu);
  MCX_RETURN_IF_ERROR(impl_->check_caller("heartbeat", task, incarnation));
  impl_->tasks[task].last_heartbeat = impl_->clock->now();
  return absl::OkStatus();
}

absl::Status CoordinationService::report_error(TaskId task, Incarnation incarnation, absl::Status error) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  MCX_RETURN_IF_ERROR(impl_->check_caller("report_error", task, incarnation));
  if (error.ok()) error = absl::UnknownError("reported an error without a message");
  impl_->fail_task_locked(task, absl::Status(error.code(), absl::StrCat("reported an error: ", error.message())), d);
  return absl::OkStatus();
}

void CoordinationService::shutdown_task(TaskId task, Incarnation incarnation, Callback<absl::Status> done) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  if (absl::Status s = impl_->check_caller("shutdown_task", task, incarnation); !s.ok()) {
    d.add([f = std::move(done), s] { f(s); });
    return;
  }
  auto leave = [this, task, incarnation](absl::Status s, Callback<absl::Status> f) {
    {
      Deferred d2;
      absl::MutexLock l2(&impl_->mu);
      Impl::Task& t = impl_->tasks[task];
      if (t.incarnation == incarnation && t.state == TaskState::kConnected) {
        t.state = TaskState::kShutdown;
        impl_->evaluate_live_sets(d2);
        impl_->changed(d2);
      }
    }
    f(s);
  };
  if (options_.recoverable || options_.shutdown_timeout == absl::ZeroDuration()) {
    d.add([leave, f = std::move(done)]() mutable { leave(absl::OkStatus(), std::move(f)); });
    return;
  }
  impl_->barrier_arrive(task, incarnation, "mcx::shutdown", 0, {}, options_.shutdown_timeout,
                        [leave, f = std::move(done)](absl::Status s) mutable {
                          if (!s.ok()) {
                            s = absl::Status(s.code(), absl::StrCat("[shutdown_task] shutdown barrier failed: ",
                                                                    s.message()));
                          }
                          leave(s, std::move(f));
                        },
                        d);
}

absl::StatusOr<uint64_t> CoordinationService::watch(TaskId task, Incarnation incarnation,
                                                    Callback<const JobState&> on_state) {
  auto w = std::make_shared<Impl::Watcher>();
  w->task = task;
  w->incarnation = incarnation;
  w->on_state = std::move(on_state);
  uint64_t id;
  {
    absl::MutexLock lock(&impl_->mu);
    if (task >= 0) {
      MCX_RETURN_IF_ERROR(impl_->check_task_id("watch", task));
      const Impl::Task& t = impl_->tasks[task];
      if (t.incarnation != incarnation || t.state == TaskState::kDisconnected) {
        return absl::FailedPreconditionError(absl::StrCat("[watch] task ", task, " with incarnation ", incarnation,
                                                          " is not registered"));
      }
      impl_->tasks[task].watchers++;
    }
    id = impl_->next_id++;
    impl_->watchers[id] = w;
  }
  impl_->deliver(w);
  return id;
}

void CoordinationService::end_watch(uint64_t watch_id, bool connection_lost) {
  std::shared_ptr<Impl::Watcher> w;
  {
    Deferred d;
    absl::MutexLock lock(&impl_->mu);
    auto it = impl_->watchers.find(watch_id);
    if (it == impl_->watchers.end()) return;
    w = it->second;
    impl_->watchers.erase(it);
    if (w->task >= 0) {
      Impl::Task& t = impl_->tasks[w->task];
      t.watchers--;
      if (connection_lost && t.state == TaskState::kConnected && t.incarnation == w->incarnation) {
        impl_->fail_task_locked(
            w->task,
            absl::UnavailableError(absl::StrCat("connection to task ", w->task,
                                                " lost (its watch stream ended: the process died or the network "
                                                "failed)")),
            d);
      }
    }
  }
  absl::MutexLock wl(&w->mu);  // waits for a delivery in progress
  w->ended = true;
}

JobState CoordinationService::job_state() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->job_state_locked();
}

// --- KV ---

namespace {
absl::Status check_key(absl::string_view api, std::string_view key, size_t max) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("[", api, "] the key is empty"));
  if (key.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", api, "] key of ", A(key).size(), " bytes exceeds the limit of ", max, " bytes"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CoordinationService::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite) {
  MCX_RETURN_IF_ERROR(check_key("kv_insert", key, options_.max_key_bytes));
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_insert] value of ", value.size(), " bytes for key '", A(key),
                                                   "' exceeds the limit of ", options_.max_value_bytes, " bytes"));
  }
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  std::string k(key);
  auto it = impl_->kv.find(k);
  size_t old = 0;
  if (it != impl_->kv.end()) {
    if (!allow_overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat("[kv_insert] key '", A(key), "' already exists (pass allow_overwrite to replace it)"));
    }
    old = it->first.size() + it->second.size();
  }
  size_t next = impl_->kv_bytes - old + k.size() + value.size();
  if (next > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("[kv_insert] the key-value store would hold ", next,
                                                     " bytes, over its limit of ", options_.max_total_bytes));
  }
  impl_->kv_bytes = next;
  impl_->kv[k] = std::string(value);
  auto w = impl_->kv_waiters.find(k);
  if (w != impl_->kv_waiters.end()) {
    std::string v(value);
    for (auto& kw : w->second) d.add([f = std::move(kw.done), v] { f(v); });
    impl_->kv_waiters.erase(w);
  }
  return absl::OkStatus();
}

void CoordinationService::kv_get(std::string_view key, absl::Duration timeout,
                                 Callback<absl::StatusOr<std::string>> done) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  if (absl::Status s = check_key("kv_get", key, options_.max_key_bytes); !s.ok()) {
    d.add([f = std::move(done), s] { f(s); });
    return;
  }
  std::string k(key);
  auto it = impl_->kv.find(k);
  if (it != impl_->kv.end()) {
    d.add([f = std::move(done), v = it->second] { f(v); });
    return;
  }
  impl_->kv_waiters[k].push_back({impl_->next_id++, impl_->clock->now() + timeout, std::move(done)});
  impl_->timer_cv.Signal();
}

absl::StatusOr<std::string> CoordinationService::kv_try_get(std::string_view key) {
  MCX_RETURN_IF_ERROR(check_key("kv_try_get", key, options_.max_key_bytes));
  absl::MutexLock lock(&impl_->mu);
  auto it = impl_->kv.find(std::string(key));
  if (it == impl_->kv.end()) return absl::NotFoundError(absl::StrCat("[kv_try_get] key '", A(key), "' is not set"));
  return it->second;
}

absl::StatusOr<int64_t> CoordinationService::kv_increment(std::string_view key, int64_t delta) {
  MCX_RETURN_IF_ERROR(check_key("kv_increment", key, options_.max_key_bytes));
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  std::string k(key);
  auto it = impl_->kv.find(k);
  int64_t value = 0;
  if (it != impl_->kv.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key),
                                                   "' holds a value that is not a decimal int64 (",
                                                   it->second.size(), " bytes)"));
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key), "': adding ", delta,
                                                   " overflows int64"));
  }
  std::string v = absl::StrCat(value);
  if (it != impl_->kv.end()) {
    impl_->kv_bytes = impl_->kv_bytes - it->second.size() + v.size();
    it->second = v;
  } else {
    impl_->kv_bytes += k.size() + v.size();
    impl_->kv[k] = v;
  }
  auto w = impl_->kv_waiters.find(k);
  if (w != impl_->kv_waiters.end()) {
    for (auto& kw : w->second) d.add([f = std::move(kw.done), v] { f(v); });
    impl_->kv_waiters.erase(w);
  }
  return value;
}

std::vector<KeyValue> CoordinationService::kv_dir(std::string_view dir) {
  std::string prefix = strip_trailing_slashes(dir);
  if (!prefix.empty()) prefix += "/";
  std::vector<KeyValue> out;
  absl::MutexLock lock(&impl_->mu);
  for (auto it = impl_->kv.lower_bound(prefix); it != impl_->kv.end() && it->first.starts_with(prefix); ++it) {
    out.push_back({it->first, it->second});
  }
  return out;
}

size_t CoordinationService::kv_delete(std::string_view key) {
  std::string k = strip_trailing_slashes(key);
  absl::MutexLock lock(&impl_->mu);
  size_t n = 0;
  if (auto it = impl_->kv.find(k); it != impl_->kv.end()) {
    impl_->kv_bytes -= it->first.size() + it->second.size();
    impl_->kv.erase(it);
    ++n;
  }
  std::string prefix = k + "/";
  auto it = impl_->kv.lower_bound(prefix);
  while (it != impl_->kv.end() && it->first.starts_with(prefix)) {
    impl_->kv_bytes -= it->first.size() + it->second.size();
    it = impl_->kv.erase(it);
    ++n;
  }
  return n;
}

// --- Barriers ---

void CoordinationService::barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                                  std::vector<TaskId> tasks, absl::Duration timeout, Callback<absl::Status> done) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  if (name == "mcx::shutdown") {
    d.add([f = std::move(done)] {
      f(absl::InvalidArgumentError("[barrier] the name 'mcx::shutdown' is reserved for the shutdown barrier"));
    });
    return;
  }
  impl_->barrier_arrive(task, incarnation, name, counter, std::move(tasks), timeout, std::move(done), d);
}

absl::Status CoordinationService::cancel_barrier(std::string_view name_in, int64_t counter) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  std::string name(name_in);
  auto it = impl_->barriers.find(name);
  absl::Status cancelled =
      absl::CancelledError(absl::StrCat("[barrier] barrier '", name, "' (instance ", counter, ") was cancelled"));
  if (it != impl_->barriers.end() && it->second.counter == counter) {
    if (it->second.done) {
      return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "' (instance ", counter,
                                                        ") already finished: ", it->second.result.ToString()));
    }
    impl_->finish_barrier(it->second, cancelled, d);
    return absl::OkStatus();
  }
  if (it != impl_->barriers.end() && counter < it->second.counter) {
    return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "': instance ", counter,
                                                      " is older than the current instance ", it->second.counter));
  }
  if (it != impl_->barriers.end() && !it->second.done) {
    return absl::FailedPreconditionError(absl::StrCat("[cancel_barrier] barrier '", name, "': instance ",
                                                      it->second.counter, " is still in flight"));
  }
  // A future instance: create it already cancelled, so its calls get CANCELLED.
  Impl::Barrier b;
  b.name = name;
  b.counter = counter;
  b.done = true;
  b.result = cancelled;
  impl_->barriers.insert_or_assign(name, std::move(b));
  return absl::OkStatus();
}

void CoordinationService::get_live_tasks(TaskId task, Incarnation incarnation, std::vector<TaskId> tasks,
                                         absl::Duration timeout, Callback<absl::StatusOr<LiveTasks>> done) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  auto reply = [&](absl::Status s) { d.add([f = std::move(done), s] { f(s); }); };
  if (absl::Status s = impl_->check_caller("get_live_tasks", task, incarnation); !s.ok()) return reply(s);
  if (absl::Status s = impl_->check_participants("get_live_tasks", tasks); !s.ok()) return reply(s);
  std::vector<TaskId> set = impl_->resolve_set(std::move(tasks));
  if (!std::binary_search(set.begin(), set.end(), task)) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("[get_live_tasks] task ", task, " is not in the requested set {", join_ids(set), "}")));
  }
  Impl::LiveSet& ls = impl_->live_sets[set];
  auto old = ls.waiting.find(task);
  if (old != ls.waiting.end()) {
    d.add([f = std::move(old->second.done)] {
      f(absl::CancelledError("[get_live_tasks] superseded by a repeated call"));
    });
    ls.waiting.erase(old);
  }
  ls.waiting[task] = Impl::LiveWaiter{incarnation, impl_->clock->now() + timeout, std::move(done)};
  impl_->timer_cv.Signal();
  impl_->evaluate_live_sets(d);
}

ServiceStatus CoordinationService::status() const {
  absl::MutexLock lock(&impl_->mu);
  absl::Time now = impl_->clock->now();
  ServiceStatus s;
  s.service_incarnation = service_incarnation_;
  s.num_tasks = options_.num_tasks;
  s.recoverable = options_.recoverable;
  s.heartbeat_timeout = options_.heartbeat_timeout;
  s.job_state_version = impl_->version;
  s.job_error = impl_->job_error;
  for (size_t i = 0; i < impl_->tasks.size(); ++i) {
    const Impl::Task& t = impl_->tasks[i];
    TaskStatus ts;
    ts.info = TaskInfo{static_cast<TaskId>(i), t.incarnation, t.state, t.error};
    if (t.ever_registered) ts.last_heartbeat_age = now - t.last_heartbeat;
    ts.watching = t.watchers > 0;
    s.tasks.push_back(std::move(ts));
  }
  for (const auto& [name, b] : impl_->barriers) {
    if (b.done) continue;
    BarrierStatus bs;
    bs.name = name;
    bs.counter = b.counter;
    bs.arrived.assign(b.arrived.begin(), b.arrived.end());
    for (TaskId p : b.participants) {
      if (!b.arrived.count(p)) bs.missing.push_back(p);
    }
    bs.age = now - b.start;
    bs.timeout = b.timeout;
    s.barriers.push_back(std::move(bs));
  }
  s.kv_keys = impl_->kv.size();
  s.kv_bytes = impl_->kv_bytes;
  return s;
}

void CoordinationService::check_timeouts() {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  impl_->check_timeouts_locked(d);
}

void CoordinationService::fail_task(TaskId task, absl::Status error) {
  Deferred d;
  absl::MutexLock lock(&impl_->mu);
  if (!impl_->check_task_id("fail_task", task).ok()) return;
  impl_->fail_task_locked(task, std::move(error), d);
}

}  // namespace mcx::distributed
