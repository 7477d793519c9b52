#include "mcx/distributed/coordination_agent.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/mutex.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {
namespace {

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

struct CoordinationAgent::Impl {
  CoordinationAgent* self;
  mutable Mutex mu;
  bool connected ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  absl::Status shutdown_result ABSL_GUARDED_BY(mu);
  Incarnation service_incarnation ABSL_GUARDED_BY(mu) = 0;
  JobState last_state ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t> barrier_counters ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t> barrier_in_flight ABSL_GUARDED_BY(mu);
  std::set<std::pair<TaskId, Incarnation>> reported ABSL_GUARDED_BY(mu);
  bool coordinator_loss_reported ABSL_GUARDED_BY(mu) = false;
  bool job_error_reported ABSL_GUARDED_BY(mu) = false;
  bool self_reported_error ABSL_GUARDED_BY(mu) = false;  // report_error() was called: our ERROR is no news
  std::unique_ptr<WatchStream> stream;
  std::thread heartbeat_thread, watcher_thread;

  bool is_stopping() const {
    MutexLock lock(&mu);
    return stopping;
  }

  // Fate-sharing default or the user's callback.
  void fail(TaskFailure f) {
    const AgentOptions& o = self->options_;
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

  void coordinator_lost(const absl::Status& why) {
    {
      MutexLock lock(&mu);
      if (stopping || coordinator_loss_reported) return;
      coordinator_loss_reported = true;
    }
    std::string msg(why.message());
    if (msg.rfind("lost the coordination service", 0) != 0) {
      msg = absl::StrCat("lost the coordination service at ", self->client_->target(), ": ", msg);
    }
    fail(TaskFailure{-1, 0, why, msg});
  }

  void on_state(const JobState& s) {
    std::vector<TaskFailure> failures;
    {
      MutexLock lock(&mu);
      last_state = s;
      if (stopping) return;
      const bool fatal_job = !s.job_error.ok();
      for (const TaskInfo& t : s.tasks) {
        if (t.state != TaskState::kError) continue;
        if (!reported.insert({t.id, t.incarnation}).second) continue;
        bool own = t.id == self->options_.task_id && t.incarnation == self->options_.incarnation;
        if (own && self_reported_error) continue;
        // In recoverable mode another task's failure is a membership change: only on_failure hears of it.
        if (!own && !fatal_job && !self->options_.on_failure) continue;
        std::string msg = own ? absl::StrCat("this task (", t.id, ") was declared failed by the coordination service: ",
                                             t.error.message())
                              : absl::StrCat("task ", t.id, " failed: ", t.error.message());
        failures.push_back(TaskFailure{t.id, t.incarnation, t.error, msg});
      }
      if (fatal_job && failures.empty() && !job_error_reported) {
        failures.push_back(TaskFailure{-1, 0, s.job_error, std::string(s.job_error.message())});
      }
      if (fatal_job) job_error_reported = true;
    }
    if (self->options_.on_job_state) self->options_.on_job_state(s);
    for (auto& f : failures) fail(f);
  }

  void heartbeat_loop() {
    const AgentOptions& o = self->options_;
    absl::Time last_ok = absl::Now();
    absl::Status last_error;
    while (true) {
      {
        MutexLock lock(&mu);
        auto stop = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping; };
        if (mu.await_for(stop, o.heartbeat_interval)) return;
      }
      absl::StatusOr<Incarnation> r = self->client_->heartbeat(o.task_id, o.incarnation, o.heartbeat_interval);
      if (is_stopping()) return;
      if (r.ok()) {
        last_ok = absl::Now();
        Incarnation expected;
        {
          MutexLock lock(&mu);
          expected = service_incarnation;
        }
        if (*r != expected) {
          coordinator_lost(absl::UnavailableError(
              absl::StrCat("the coordination service restarted (incarnation ", expected, " -> ", *r, ")")));
          return;
        }
        continue;
      }
      absl::StatusCode c = r.status().code();
      if (c == absl::StatusCode::kAborted || c == absl::StatusCode::kFailedPrecondition ||
          c == absl::StatusCode::kInvalidArgument) {
        // The service answered and refuses us: we were declared failed, or the job failed. The watcher
        // usually reports it first with the precise reason; this catches the rest.
        absl::SleepFor(absl::Milliseconds(200));
        if (is_stopping()) return;
        bool job_reported;
        {
          MutexLock lock(&mu);
          job_reported = job_error_reported || self_reported_error ||
                         reported.count({o.task_id, o.incarnation}) > 0;
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
        coordinator_lost(absl::UnavailableError(absl::StrCat("no successful heartbeat for ",
                                                             absl::FormatDuration(absl::Now() - last_ok),
                                                             " (last error: ", last_error.message(), ")")));
        return;
      }
    }
  }

  void watch_loop() {
    while (true) {
      absl::StatusOr<JobState> s = stream->next(absl::Milliseconds(200));
      if (s.ok()) {
        on_state(*s);
        continue;
      }
      if (is_stopping()) return;
      if (s.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      coordinator_lost(s.status());
      return;
    }
  }

  void stop_threads() {
    {
      MutexLock lock(&mu);
      stopping = true;
    }
    if (stream) stream->cancel();
    if (heartbeat_thread.joinable()) heartbeat_thread.join();
    if (watcher_thread.joinable()) watcher_thread.join();
    stream.reset();
  }
};

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
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "[connect] cannot reach the coordination service at ", client_->target(), " within ",
          absl::FormatDuration(options_.init_timeout), " (task ", options_.task_id, "): ", last.message()));
    }
    reg = client_->register_task(options_.task_id, options_.incarnation, options_.num_tasks, left);
    if (reg.ok()) break;
    last = reg.status();
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
  impl_->stream = std::move(*stream);
  absl::StatusOr<JobState> first = impl_->stream->next(options_.rpc_timeout);
  if (!first.ok()) {
    impl_->stream.reset();
    return absl::Status(first.status().code(),
                        absl::StrCat("[connect] the watch stream did not deliver the job state: ",
                                     first.status().message()));
  }
  {
    MutexLock lock(&impl_->mu);
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
  }
  absl::Status s = client_->shutdown_task(options_.task_id, options_.incarnation, options_.shutdown_timeout);
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
  return client_->report_error(options_.task_id, options_.incarnation, error, options_.rpc_timeout);
}

bool CoordinationAgent::connected() const {
  MutexLock lock(&impl_->mu);
  return impl_->connected;
}

absl::Status CoordinationAgent::kv_set(std::string_view key, std::string_view value, bool allow_overwrite) {
  return client_->kv_insert(key, value, allow_overwrite, options_.rpc_timeout);
}
absl::StatusOr<std::string> CoordinationAgent::kv_get(std::string_view key, absl::Duration timeout) {
  return client_->kv_get(key, timeout);
}
absl::StatusOr<std::string> CoordinationAgent::kv_try_get(std::string_view key) {
  return client_->kv_try_get(key, options_.rpc_timeout);
}
absl::StatusOr<int64_t> CoordinationAgent::kv_increment(std::string_view key, int64_t delta) {
  return client_->kv_increment(key, delta, options_.rpc_timeout);
}
absl::StatusOr<std::vector<KeyValue>> CoordinationAgent::kv_dir(std::string_view dir) {
  return client_->kv_dir(dir, options_.rpc_timeout);
}
absl::StatusOr<int64_t> CoordinationAgent::kv_delete(std::string_view key) {
  return client_->kv_delete(key, options_.rpc_timeout);
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
  absl::Status s = client_->barrier(options_.task_id, options_.incarnation, name, counter, tasks, timeout);
  MutexLock lock(&impl_->mu);
  impl_->barrier_in_flight.erase(n);
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
  return client_->cancel_barrier(name, counter, options_.rpc_timeout);
}

absl::StatusOr<LiveTasks> CoordinationAgent::get_live_tasks(const LiveSetRequest& request, absl::Duration timeout) {
  return client_->get_live_tasks(options_.task_id, options_.incarnation, request, timeout);
}

JobState CoordinationAgent::last_job_state() const {
  MutexLock lock(&impl_->mu);
  return impl_->last_state;
}

}  // namespace mcx::distributed
