// The coordination service's life cycle, its timer, the job state and its watchers, and status (service.h). The
// concerns have files of their own: service_tasks.cc, service_barriers.cc, service_live_sets.cc, service_kv.cc.
#include "mcx/distributed/coordination/service.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service_format.h"
#include "mcx/core/config.h"
#include "mcx/distributed/security/job_secret.h"

namespace mcx::distributed {

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
  absl::StatusOr<int64_t> max_keys = kKvMaxKeysPerTaskFlag.resolve(options.max_keys_per_task);
  if (!max_keys.ok()) return max_keys.status();
  absl::StatusOr<int64_t> max_bytes = kKvMaxBytesPerTaskFlag.resolve(options.max_bytes_per_task);
  if (!max_bytes.ok()) return max_bytes.status();
  options.max_keys_per_task = *max_keys;
  options.max_bytes_per_task = *max_bytes;
  std::unique_ptr<CoordinationService> s(new CoordinationService(std::move(options)));
  if (s->options_.start_timer_thread) {
    s->timer_ = std::thread([service = s.get()] { service->timer_loop(); });
  }
  return s;
}

CoordinationService::CoordinationService(ServiceOptions options)
    : options_(std::move(options)), service_incarnation_(random_incarnation()),
      clock_(options_.clock ? options_.clock : SystemClock::get()), tasks_(options_.num_tasks) {
  auto all = std::make_shared<std::vector<TaskId>>(options_.num_tasks);
  for (int i = 0; i < options_.num_tasks; ++i) (*all)[i] = i;
  all_tasks_ = std::move(all);
  // The job's secrets (job_secret.h): new with every coordinator incarnation, written and deleted by nobody
  // else, and not counted against the job's key-value budget or in its statistics.
  MutexLock lock(&mu_);
  kv_.emplace(std::string(kDataPlaneSecretKey), new_job_secret());
  kv_.emplace(std::string(kServiceModeKey), options_.recoverable ? "recoverable" : "fate-sharing");
  // States, not events: read from the status at each scrape.
  registry_.gauge_callback("mcx_coordinator_tasks", "tasks of the job by state", {"state"}, [this] {
    std::map<std::string, double> by_state;
    for (const char* s : {"disconnected", "connected", "error", "shutdown"}) by_state[s] = 0;
    for (const TaskStatus& t : status().tasks) by_state[absl::AsciiStrToLower(std::string(task_state_name(t.info.state)))] += 1;
    metrics::Registry::Samples samples;
    for (const auto& [state, n] : by_state) samples.push_back({{state}, n});
    return samples;
  });
  registry_.gauge_callback("mcx_coordinator_kv_keys", "keys in the key-value store", {}, [this] {
    return metrics::Registry::Samples{{{}, static_cast<double>(status().kv_keys)}};
  });
  registry_.gauge_callback("mcx_coordinator_kv_bytes", "bytes of keys and values in the key-value store", {}, [this] {
    return metrics::Registry::Samples{{{}, static_cast<double>(status().kv_bytes)}};
  });
}

CoordinationService::~CoordinationService() {
  {
    ServiceLock lock(&mu_);
    stopping_ = true;
    timer_cv_.signal_all();
    absl::Status st = absl::AbortedError("[coordination] the coordination service is stopping");
    for (auto& w : register_waiters_) lock.defer([f = std::move(w.done), st] { f(st); });
    register_waiters_.clear();
    for (auto& [n, b] : barriers_) {
      if (!b.done) finish_barrier_locked(b, st, lock);
    }
    for (auto& [s, ls] : live_sets_) {
      for (auto& [id, w] : ls.waiting) lock.defer([f = std::move(w.done), st] { f(st); });
    }
    live_sets_.clear();
    for (auto& [k, ws] : kv_waiters_) {
      for (auto& w : ws) lock.defer([f = std::move(w.done), st] { f(st); });
    }
    kv_waiters_.clear();
  }
  if (timer_.joinable()) timer_.join();
}

void CoordinationService::timer_loop() {
  absl::Duration tick = std::min(absl::Milliseconds(100), options_.heartbeat_timeout / 10);
  while (true) {
    ServiceLock lock(&mu_);
    if (stopping_) return;
    absl::Time now = clock_->now();
    absl::Duration wait = std::min(tick, earliest_deadline_locked() - now);
    if (wait > absl::ZeroDuration()) {
      timer_wake_at_ = now + wait;
      timer_cv_.wait_for(&mu_, wait);
      timer_wake_at_ = absl::InfinitePast();
    }
    if (stopping_) return;
    check_timeouts_locked(lock);
  }
}

absl::Time CoordinationService::earliest_deadline_locked() const {
  absl::Time t = absl::InfiniteFuture();
  for (const auto& w : register_waiters_) t = std::min(t, w.deadline);
  for (const auto& [n, b] : barriers_) {
    if (!b.done) t = std::min(t, b.deadline);
  }
  for (const auto& [s, ls] : live_sets_) {
    for (const auto& [id, w] : ls.waiting) t = std::min(t, w.deadline);
  }
  for (const auto& [k, ws] : kv_waiters_) {
    for (const auto& w : ws) t = std::min(t, w.deadline);
  }
  return t;
}

// A wait with this deadline was added: wakes the timer thread only if its current wait ends later (a
// barrier of 64 tasks used to wake it 64 times, each scanning every deadline).
void CoordinationService::wake_timer_for_locked(absl::Time deadline) {
  if (deadline < timer_wake_at_) timer_cv_.signal();
}

void CoordinationService::check_timeouts() {
  ServiceLock lock(&mu_);
  check_timeouts_locked(lock);
}

void CoordinationService::check_timeouts_locked(ServiceLock& lock) {
  const absl::Time now = clock_->now();
  expire_tasks_locked(now, lock);
  expire_barriers_locked(now, lock);
  expire_live_sets_locked(now, lock);
  expire_kv_gets_locked(now, lock);
}

absl::Status CoordinationService::check_task_id(absl::string_view api, TaskId task) const {
  if (task < 0 || task >= options_.num_tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", api, "] task id ", task, " is outside [0, ", options_.num_tasks, ")"));
  }
  return absl::OkStatus();
}

// The caller must be a CONNECTED task with this incarnation.
absl::Status CoordinationService::check_caller_locked(absl::string_view api, TaskId task, Incarnation inc) const {
  MCX_RETURN_IF_ERROR(check_task_id(api, task));
  if (!options_.recoverable && !job_error_.ok()) {
    return absl::AbortedError(absl::StrCat("[", api, "] the job has failed: ", job_error_.message()));
  }
  const Task& t = tasks_[task];
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

absl::Status CoordinationService::check_participants(absl::string_view api, const std::vector<TaskId>& ids) const {
  for (TaskId t : ids) MCX_RETURN_IF_ERROR(check_task_id(api, t));
  return absl::OkStatus();
}

CoordinationService::TaskSet CoordinationService::resolve_set(std::vector<TaskId> ids) const {
  if (ids.empty()) return all_tasks_;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return std::make_shared<const std::vector<TaskId>>(std::move(ids));
}

JobState CoordinationService::job_state_locked() const {
  JobState s;
  s.version = version_;
  s.service_incarnation = service_incarnation_;
  s.job_error = job_error_;
  s.tasks.reserve(tasks_.size());
  for (size_t i = 0; i < tasks_.size(); ++i) {
    s.tasks.push_back(TaskInfo{static_cast<TaskId>(i), tasks_[i].incarnation, tasks_[i].state, tasks_[i].error});
  }
  return s;
}

// "task 1 (CONNECTED, last heartbeat 0.3s ago)"
std::string CoordinationService::describe_task_locked(TaskId id, absl::Time now) const {
  const Task& t = tasks_[id];
  switch (t.state) {
    case TaskState::kDisconnected: return absl::StrCat("task ", id, " (never registered)");
    case TaskState::kConnected:
      return absl::StrCat("task ", id, " (connected, last heartbeat ", fmt_duration(now - t.last_heartbeat), " ago)");
    case TaskState::kError: return absl::StrCat("task ", id, " (failed: ", t.error.message(), ")");
    case TaskState::kShutdown: return absl::StrCat("task ", id, " (shut down)");
  }
  return "";
}

namespace {
// The delivery batches this thread has open, innermost first (DeliveryBatch::outer_ links them).
thread_local CoordinationService::DeliveryBatch* open_batches = nullptr;
}  // namespace

CoordinationService::DeliveryBatch::DeliveryBatch(CoordinationService* service)
    : service_(service), outer_(open_batches) {
  open_batches = this;
}

CoordinationService::DeliveryBatch::~DeliveryBatch() {
  open_batches = outer_;
  if (!changed_) return;
  // An outer batch on the same service takes the change over.
  for (DeliveryBatch* b = outer_; b != nullptr; b = b->outer_) {
    if (b->service_ == service_) {
      b->changed_ = true;
      return;
    }
  }
  ServiceLock lock(&service_->mu_);
  service_->schedule_deliveries_locked(lock);
}

void CoordinationService::changed_locked(ServiceLock& lock) {
  ++version_;
  for (DeliveryBatch* b = open_batches; b != nullptr; b = b->outer_) {
    if (b->service_ == this) {
      b->changed_ = true;
      return;
    }
  }
  schedule_deliveries_locked(lock);
}

void CoordinationService::schedule_deliveries_locked(ServiceLock& lock) {
  for (auto& [id, w] : watchers_) {
    if (w->scheduled) continue;  // its queued delivery will read the newest version
    w->scheduled = true;
    lock.defer([this, wp = w] { deliver(wp); });
  }
}

void CoordinationService::deliver(const std::shared_ptr<Watcher>& w) {
  MutexLock wl(&w->mu);
  std::shared_ptr<const JobStateSnapshot> s;
  {
    MutexLock lock(&mu_);
    w->scheduled = false;
    if (w->ended) return;
    if (!w->first && version_ <= w->delivered) return;  // already has the newest: no state built
    s = job_state_snapshot_locked();
  }
  w->first = false;
  w->delivered = s->version();
  w->on_state(s);
}

std::shared_ptr<const JobStateSnapshot> CoordinationService::job_state_snapshot_locked() {
  if (!snapshot_) {
    snapshot_ = std::make_shared<const JobStateSnapshot>(job_state_locked());
  } else if (snapshot_->version() != version_) {
    snapshot_ = std::make_shared<const JobStateSnapshot>(*snapshot_, job_state_locked());
  }
  return snapshot_;
}

absl::StatusOr<uint64_t> CoordinationService::watch(TaskId task, Incarnation incarnation,
                                                    Callback<const std::shared_ptr<const JobStateSnapshot>&> on_state) {
  auto w = std::make_shared<Watcher>();
  w->task = task;
  w->incarnation = incarnation;
  w->on_state = std::move(on_state);
  uint64_t id;
  {
    MutexLock lock(&mu_);
    if (task >= 0) {
      MCX_RETURN_IF_ERROR(check_task_id("watch", task));
      const Task& t = tasks_[task];
      if (t.incarnation != incarnation || t.state == TaskState::kDisconnected) {
        return absl::FailedPreconditionError(absl::StrCat("[watch] task ", task, " with incarnation ", incarnation,
                                                          " is not registered"));
      }
      tasks_[task].watchers++;
    }
    id = next_id_++;
    watchers_[id] = w;
  }
  deliver(w);
  return id;
}

void CoordinationService::end_watch(uint64_t watch_id, bool connection_lost) {
  std::shared_ptr<Watcher> w;
  {
    ServiceLock lock(&mu_);
    auto it = watchers_.find(watch_id);
    if (it == watchers_.end()) return;
    w = it->second;
    watchers_.erase(it);
    if (w->task >= 0) {
      Task& t = tasks_[w->task];
      t.watchers--;
      if (connection_lost && t.state == TaskState::kConnected && t.incarnation == w->incarnation) {
        fail_task_locked(
            w->task,
            absl::UnavailableError(absl::StrCat("connection to task ", w->task,
                                                " lost (its watch stream ended: the process died or the network "
                                                "failed)")),
            lock);
      }
    }
  }
  MutexLock wl(&w->mu);  // waits for a delivery in progress
  w->ended = true;
}

JobState CoordinationService::job_state() const {
  MutexLock lock(&mu_);
  return job_state_locked();
}

ServiceStatus CoordinationService::status() const {
  MutexLock lock(&mu_);
  absl::Time now = clock_->now();
  ServiceStatus s;
  s.service_incarnation = service_incarnation_;
  s.num_tasks = options_.num_tasks;
  s.recoverable = options_.recoverable;
  s.heartbeat_timeout = options_.heartbeat_timeout;
  s.job_state_version = version_;
  s.job_error = job_error_;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    TaskStatus ts;
    ts.info = TaskInfo{static_cast<TaskId>(i), t.incarnation, t.state, t.error};
    if (t.ever_registered) ts.last_heartbeat_age = now - t.last_heartbeat;
    ts.watching = t.watchers > 0;
    ts.rejoined = t.rejoined;
    s.tasks.push_back(std::move(ts));
  }
  for (const auto& [name, b] : barriers_) {
    if (b.done) continue;
    BarrierStatus bs;
    bs.name = name;
    bs.counter = b.counter;
    bs.arrived.assign(b.arrived.begin(), b.arrived.end());
    for (TaskId p : *b.participants) {
      if (!b.arrived.count(p)) bs.missing.push_back(p);
    }
    bs.age = now - b.start;
    bs.timeout = b.timeout;
    s.barriers.push_back(std::move(bs));
  }
  size_t service_keys = 0;  // (job_secret.h: under two prefixes, counted rather than assumed)
  for (std::string_view prefix : {kSecretKeys, kServiceKeys}) {
    for (auto it = kv_.lower_bound(std::string(prefix)); it != kv_.end() && it->first.starts_with(prefix);
         ++it) {
      ++service_keys;
    }
  }
  s.kv_keys = kv_.size() - service_keys;  // the job's own keys
  s.kv_bytes = kv_bytes_;
  s.rebuilt = rebuilt_;
  s.live_set_generation = live_set_generation_;
  return s;
}

}  // namespace mcx::distributed
