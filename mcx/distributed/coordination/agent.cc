#include "mcx/distributed/coordination/agent.h"

#include "mcx/core/profiler.h"
#include "mcx/distributed/coordination/agent_impl.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination/clock_offset.h"

namespace mcx::distributed {
namespace {

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

// --- Impl: failure reports and the two threads -----------------------------------------------------------

// Fate-sharing default or the user's callback.
void CoordinationAgent::Impl::fail(TaskFailure f) {
  const AgentOptions& o = options();
  if (o.on_failure) {
    o.on_failure(f);
    return;
  }
  std::string line = absl::StrCat("[mcx.distributed] ", f.message, "; terminating task ", o.task_id,
                                  " (fate-sharing; set on_failure or recoverable mode to keep running)");
  log_error("{}", line);
  logger().flush();
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(kFailureExitCode);
}

void CoordinationAgent::Impl::coordinator_lost(const absl::Status& why) {
  {
    MutexLock lock(&mu);
    if (stopping || coordinator_loss_reported) return;
    coordinator_loss_reported = true;
    if (shutting_down) {
      log_warn("[mcx.distributed] task {} lost the coordination service while shutting down: {}", options().task_id,
               std::string(why.message()));
      return;
    }
  }
  std::string msg(why.message());
  if (msg.rfind("lost the coordination service", 0) != 0) {
    msg = absl::StrCat("lost the coordination service at ", client().target(), ": ", msg);
  }
  fail(TaskFailure{-1, 0, why, msg});
}

void CoordinationAgent::Impl::on_state(const JobState& s) {
  std::vector<TaskFailure> failures;
  {
    MutexLock lock(&mu);
    last_state = s;
    if (stopping) return;
    const bool fatal_job = !s.job_error.ok();
    for (const TaskInfo& t : s.tasks) {
      if (t.state != TaskState::kError) continue;
      if (!reported.insert({t.id, t.incarnation}).second) continue;
      bool own = t.id == options().task_id && t.incarnation == options().incarnation;
      if (own && self_reported_error) continue;
      // In recoverable mode another task's failure is a membership change: only on_failure hears of it.
      if (!own && !fatal_job && !options().on_failure) continue;
      std::string msg = own ? absl::StrCat("this task (", t.id, ") was declared failed by the coordination service: ",
                                           t.error.message())
                            : absl::StrCat("task ", t.id, " failed: ", t.error.message());
      failures.push_back(TaskFailure{t.id, t.incarnation, t.error, msg});
    }
    if (fatal_job && failures.empty() && !job_error_reported) {
      failures.push_back(TaskFailure{-1, 0, s.job_error, std::string(s.job_error.message())});
    }
    // A state may list several failed tasks at once (a watcher skips versions): in a fate-sharing job the others
    // died of the first failure (the job error names it), so report that one first, not the lowest id.
    if (fatal_job && failures.size() > 1) {
      std::stable_partition(failures.begin(), failures.end(), [&](const TaskFailure& f) {
        return absl::StartsWith(s.job_error.message(), absl::StrCat("task ", f.task, " failed:"));
      });
    }
    if (fatal_job) job_error_reported = true;
  }
  if (options().on_job_state) options().on_job_state(s);
  for (auto& f : failures) fail(f);
}

void CoordinationAgent::Impl::heartbeat_loop() {
  const AgentOptions& o = options();
  absl::Time last_ok = absl::Now();
  absl::Status last_error;
  uint64_t seen_epoch = 0;
  ClockOffsetEstimate clock;
  bool first = true;  // the first heartbeat goes at once: its round trip is the clock's first estimate
  while (true) {
    uint64_t epoch;
    Incarnation expected;
    bool up;
    {
      MutexLock lock(&mu);
      // Sleeps on its own condition variable, not mu.await(): every unlock of mu would wake an await()er, and
      // with dozens of processes per core those wake-ups of an idle thread cost more than the calls.
      const absl::Time wake_at = absl::Now() + (first ? absl::ZeroDuration() : o.heartbeat_interval);
      first = false;
      while (!stopping && absl::Now() < wake_at) stop_cv.wait_for(&mu, wake_at - absl::Now());
      if (stopping) return;
      epoch = link_epoch;
      expected = service_incarnation;
      up = link == Link::kUp && !rejoin_requested;
    }
    if (!up || epoch != seen_epoch) {  // paused while rejoining; the clock restarts after a rejoin
      last_ok = absl::Now();
      seen_epoch = epoch;
      if (!up) continue;
    }
    const int64_t sent_us = profiler::trace_clock_us();
    absl::StatusOr<HeartbeatReply> r = client().heartbeat(o.task_id, o.incarnation, o.heartbeat_interval);
    if (is_stopping()) return;
    if (r.ok()) {
      last_ok = absl::Now();
      if (r->service_clock_us >= 0) clock.add(sent_us, r->service_clock_us, profiler::trace_clock_us());
      if (r->service_incarnation != expected) {
        absl::Status why = absl::UnavailableError(absl::StrCat("the coordination service restarted (incarnation ",
                                                               expected, " -> ", r->service_incarnation, ")"));
        if (o.recoverable) {
          request_rejoin(why, epoch);
          continue;
        }
        coordinator_lost(why);
        return;
      }
      continue;
    }
    absl::StatusCode c = r.status().code();
    if (o.recoverable && c == absl::StatusCode::kFailedPrecondition) {
      // The service does not know this task (with this incarnation): a restarted coordinator; or a restarted
      // process took this task's place, which the rejoin finds out.
      request_rejoin(absl::UnavailableError(absl::StrCat("the coordination service refused a heartbeat (",
                                                         r.status().message(), "): it may have restarted")),
                     epoch);
      continue;
    }
    if (c == absl::StatusCode::kAborted || c == absl::StatusCode::kFailedPrecondition ||
        c == absl::StatusCode::kInvalidArgument) {
      // The service answered and refuses us: we were declared failed, or the job failed. The watcher
      // usually reports it first with the precise reason; this catches the rest.
      absl::SleepFor(absl::Milliseconds(200));
      if (is_stopping()) return;
      bool job_reported;
      {
        MutexLock lock(&mu);
        job_reported = job_error_reported || self_reported_error || reported.count({o.task_id, o.incarnation}) > 0;
      }
      if (!job_reported) {
        fail(TaskFailure{o.task_id, o.incarnation, r.status(),
                         absl::StrCat("the coordination service refused a heartbeat of task ", o.task_id, ": ",
                                      r.status().message())});
      }
      return;
    }
    last_error = r.status();
    if (absl::Now() - last_ok > o.heartbeat_timeout) {
      absl::Status why = absl::UnavailableError(absl::StrCat("no successful heartbeat for ",
                                                             absl::FormatDuration(absl::Now() - last_ok),
                                                             " (last error: ", last_error.message(), ")"));
      if (o.recoverable) {
        request_rejoin(why, epoch);
        last_ok = absl::Now();
        continue;
      }
      coordinator_lost(why);
      return;
    }
  }
}

void CoordinationAgent::Impl::watch_loop() {
  std::shared_ptr<WatchStream> s;
  {
    MutexLock lock(&mu);
    s = stream;
  }
  while (s) {
    absl::StatusOr<JobState> st = s->next(absl::Milliseconds(200));
    if (st.ok()) {
      on_state(*st);
      continue;
    }
    if (is_stopping()) return;
    const absl::StatusCode c = st.status().code();
    if (c == absl::StatusCode::kDeadlineExceeded) continue;
    // A refused stream (identity, unknown task) is not a lost coordinator: no rejoin would change it.
    if (!options().recoverable || c == absl::StatusCode::kPermissionDenied ||
        c == absl::StatusCode::kFailedPrecondition) {
      coordinator_lost(st.status());
      return;
    }
    absl::Status why = st.status();
    {
      MutexLock lock(&mu);
      if (rejoin_requested) why = rejoin_reason;
    }
    s = rejoin(why);
  }
}

void CoordinationAgent::Impl::stop_threads() {
  std::shared_ptr<WatchStream> s;
  {
    MutexLock lock(&mu);
    stopping = true;
    s = stream;
    stop_cv.signal_all();
  }
  if (s) s->cancel();
  if (heartbeat_thread.joinable()) heartbeat_thread.join();
  if (watcher_thread.joinable()) watcher_thread.join();
  std::shared_ptr<WatchStream> last;
  {
    MutexLock lock(&mu);
    last = std::move(stream);
  }
}

// --- CoordinationAgent -------------------------------------------------------------------------------------

CoordinationAgent::CoordinationAgent(std::unique_ptr<CoordinationClient> client, AgentOptions options)
    : client_(std::move(client)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  impl_->self = this;
  if (options_.incarnation == 0) options_.incarnation = random_incarnation();
}

CoordinationAgent::~CoordinationAgent() { impl_->stop_threads(); }

absl::Status CoordinationAgent::connect() {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->connected || impl_->stopping) {
      return absl::FailedPreconditionError("[connect] the agent is already connected (or was shut down)");
    }
  }
  const absl::Time deadline = absl::Now() + options_.init_timeout;
  absl::Duration backoff = absl::Milliseconds(20);
  absl::Status last;
  absl::StatusOr<RegisterResult> reg;
  size_t published = 0;  // of options_.publish_on_connect
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "[connect] cannot reach the coordination service at ", client_->target(), " within ",
          absl::FormatDuration(options_.init_timeout), " (task ", options_.task_id, "): ", last.message()));
    }
    last = absl::OkStatus();
    for (; published < options_.publish_on_connect.size() && last.ok(); ++published) {
      const KeyValue& e = options_.publish_on_connect[published];
      last = client_->kv_insert(e.key, e.value, /*allow_overwrite=*/true, left);
      if (!last.ok()) break;
      if (options_.recoverable) impl_->remember(e.key, e.value, /*allow_overwrite=*/true);
    }
    if (last.ok()) {
      reg = client_->register_task(options_.task_id, options_.incarnation, options_.num_tasks, left);
      if (reg.ok()) break;
      last = reg.status();
    }
    // UNAVAILABLE: the service is not up yet (or the connection failed): retry until the deadline.
    if (last.code() != absl::StatusCode::kUnavailable) {
      return absl::Status(last.code(), absl::StrCat("[connect] task ", options_.task_id, ": ", last.message()));
    }
    absl::SleepFor(std::min(backoff, std::max(absl::ZeroDuration(), deadline - absl::Now())));
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
  {
    MutexLock lock(&impl_->mu);
    impl_->service_incarnation = reg->service_incarnation;
  }
  absl::StatusOr<std::unique_ptr<WatchStream>> stream =
      client_->watch(options_.task_id, options_.incarnation, options_.rpc_timeout);
  if (!stream.ok()) {
    return absl::Status(stream.status().code(),
                        absl::StrCat("[connect] cannot open the watch stream: ", stream.status().message()));
  }
  std::shared_ptr<WatchStream> opened = std::move(*stream);
  absl::StatusOr<JobState> first = opened->next(options_.rpc_timeout);
  if (!first.ok()) {
    return absl::Status(first.status().code(),
                        absl::StrCat("[connect] the watch stream did not deliver the job state: ",
                                     first.status().message()));
  }
  {
    MutexLock lock(&impl_->mu);
    impl_->stream = std::move(opened);
    impl_->connected = true;
  }
  impl_->on_state(*first);
  impl_->heartbeat_thread = std::thread([this] { impl_->heartbeat_loop(); });
  impl_->watcher_thread = std::thread([this] { impl_->watch_loop(); });
  return absl::OkStatus();
}

absl::Status CoordinationAgent::shutdown() {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return impl_->shutdown_result;
    if (!impl_->connected) {
      impl_->shut_down = true;
      return absl::OkStatus();
    }
    impl_->shutting_down = true;
  }
  if (absl::Status f = client_->kv_flush(options_.rpc_timeout); !f.ok()) {
    log_warn("[mcx.distributed] task {} shutting down: {}", options_.task_id, std::string(f.message()));
  }
  absl::Status s = impl_->retrying<absl::Status>("shutdown_task", options_.shutdown_timeout, [this](absl::Duration t) {
    return client_->shutdown_task(options_.task_id, options_.incarnation, t);
  });
  impl_->stop_threads();
  MutexLock lock(&impl_->mu);
  impl_->shut_down = true;
  impl_->connected = false;
  impl_->shutdown_result = s;
  return s;
}

absl::Status CoordinationAgent::report_error(const absl::Status& error) {
  {
    MutexLock lock(&impl_->mu);
    impl_->self_reported_error = true;
    impl_->job_error_reported = true;  // the job error it causes is ours: other tasks' failures still count
  }
  return impl_->retrying<absl::Status>("report_error", options_.rpc_timeout, [&](absl::Duration t) {
    return client_->report_error(options_.task_id, options_.incarnation, error, t);
  });
}

bool CoordinationAgent::connected() const {
  MutexLock lock(&impl_->mu);
  return impl_->connected;
}

Incarnation CoordinationAgent::service_incarnation() const {
  MutexLock lock(&impl_->mu);
  return impl_->service_incarnation;
}

int CoordinationAgent::rejoins() const {
  MutexLock lock(&impl_->mu);
  return static_cast<int>(impl_->link_epoch);
}

absl::Status CoordinationAgent::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite) {
  absl::Status s = impl_->retrying<absl::Status>("kv_insert", options_.rpc_timeout, [&](absl::Duration t) {
    return client_->kv_insert(key, value, allow_overwrite, t);
  });
  if (s.ok() && options_.recoverable) impl_->remember(key, value, allow_overwrite);
  return s;
}
absl::Status CoordinationAgent::kv_insert_async(std::string_view key, std::string_view value, bool allow_overwrite) {
  if (options_.recoverable) impl_->remember(key, value, allow_overwrite);
  return client_->kv_insert_async(key, value, allow_overwrite, options_.rpc_timeout);
}

absl::Status CoordinationAgent::kv_flush(absl::Duration timeout) { return client_->kv_flush(timeout); }

absl::StatusOr<std::string> CoordinationAgent::kv_get(std::string_view key, absl::Duration timeout) {
  return impl_->retrying<absl::StatusOr<std::string>>("kv_get", timeout,
                                                      [&](absl::Duration t) { return client_->kv_get(key, t); });
}
absl::StatusOr<std::string> CoordinationAgent::kv_try_get(std::string_view key) {
  return impl_->retrying<absl::StatusOr<std::string>>("kv_try_get", options_.rpc_timeout,
                                                      [&](absl::Duration t) { return client_->kv_try_get(key, t); });
}
absl::StatusOr<int64_t> CoordinationAgent::kv_increment(std::string_view key, int64_t delta) {
  return impl_->retrying<absl::StatusOr<int64_t>>(
      "kv_increment", options_.rpc_timeout, [&](absl::Duration t) { return client_->kv_increment(key, delta, t); });
}
absl::StatusOr<std::vector<KeyValue>> CoordinationAgent::kv_dir(std::string_view dir) {
  return impl_->retrying<absl::StatusOr<std::vector<KeyValue>>>(
      "kv_dir", options_.rpc_timeout, [&](absl::Duration t) { return client_->kv_dir(dir, t); });
}
absl::StatusOr<int64_t> CoordinationAgent::kv_delete(std::string_view key) {
  if (options_.recoverable) impl_->forget(key);  // first: a rejoin meanwhile must not write it again
  return impl_->retrying<absl::StatusOr<int64_t>>("kv_delete", options_.rpc_timeout,
                                                  [&](absl::Duration t) { return client_->kv_delete(key, t); });
}

absl::Status CoordinationAgent::barrier(std::string_view name, absl::Duration timeout,
                                        const std::vector<TaskId>& tasks) {
  std::string n(name);
  int64_t counter;
  {
    MutexLock lock(&impl_->mu);
    if (impl_->barrier_in_flight.count(n)) {
      return absl::FailedPreconditionError(
          absl::StrCat("[barrier] barrier '", A(name), "' is already being waited on by another thread of this task"));
    }
    counter = impl_->barrier_counters[n]++;
    impl_->barrier_in_flight[n] = counter;
  }
  // Retried after a rejoin with the same counter: the restarted service meets the participants again in the
  // instance, or, when one of them had passed it already (the old service died while answering), completes it
  // at once (that participant reports it when it rejoins: barrier_passed).
  absl::Status s = impl_->retrying<absl::Status>("barrier", timeout, [&](absl::Duration t) {
    return client_->barrier(options_.task_id, options_.incarnation, name, counter, tasks, t);
  });
  MutexLock lock(&impl_->mu);
  impl_->barrier_in_flight.erase(n);
  if (s.ok()) impl_->barrier_passed[n] = counter;
  return s;
}

absl::Status CoordinationAgent::cancel_barrier(std::string_view name) {
  std::string n(name);
  int64_t counter;
  {
    MutexLock lock(&impl_->mu);
    auto it = impl_->barrier_in_flight.find(n);
    counter = it != impl_->barrier_in_flight.end() ? it->second : impl_->barrier_counters[n];
  }
  return impl_->retrying<absl::Status>("cancel_barrier", options_.rpc_timeout,
                                       [&](absl::Duration t) { return client_->cancel_barrier(name, counter, t); });
}

absl::StatusOr<LiveTasks> CoordinationAgent::get_live_tasks(const LiveSetRequest& request, absl::Duration timeout) {
  absl::StatusOr<LiveTasks> r = impl_->retrying<absl::StatusOr<LiveTasks>>(
      "get_live_tasks", timeout,
      [&](absl::Duration t) { return client_->get_live_tasks(options_.task_id, options_.incarnation, request, t); });
  if (r.ok()) {
    MutexLock lock(&impl_->mu);
    impl_->live_set_generation = std::max(impl_->live_set_generation, r->generation);
  }
  return r;
}

JobState CoordinationAgent::last_job_state() const {
  MutexLock lock(&impl_->mu);
  return impl_->last_state;
}

}  // namespace mcx::distributed
