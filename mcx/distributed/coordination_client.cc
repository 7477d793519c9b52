#include "mcx/distributed/coordination_client.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/mutex.h"

namespace mcx::distributed {
namespace {

// Waits for a service callback; the callback may run after the waiter gave up (shared state).
template <typename T>
class Waiter {
 public:
  Waiter() : state_(std::make_shared<State>()) {}
  Callback<T> callback() {
    return [s = state_](T v) {
      MutexLock lock(&s->mu);
      s->value.emplace(std::move(v));
    };
  }
  T wait(std::string_view api, absl::Duration timeout) {
    MutexLock lock(&state_->mu);
    auto ready = [s = state_.get()] { return s->value.has_value(); };
    if (!state_->mu.await_for(ready, timeout + kRpcGrace)) {
      return T(absl::DeadlineExceededError(absl::StrCat("[", std::string(api), "] no answer from the in-process "
                                                        "coordination service within ",
                                                        absl::FormatDuration(timeout + kRpcGrace))));
    }
    return std::move(*state_->value);
  }

 private:
  struct State {
    Mutex mu;
    std::optional<T> value ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<State> state_;
};

}  // namespace

struct InProcessClient::Streams {
  struct StreamState {
    Mutex mu;
    std::optional<JobState> latest ABSL_GUARDED_BY(mu);
    uint64_t returned_version ABSL_GUARDED_BY(mu) = 0;
    bool any_returned ABSL_GUARDED_BY(mu) = false;
    absl::Status end ABSL_GUARDED_BY(mu);  // non-OK once ended
    uint64_t watch_id = 0;
    bool closed ABSL_GUARDED_BY(mu) = false;  // end_watch already called
  };
  Mutex mu;
  std::set<std::shared_ptr<StreamState>> open ABSL_GUARDED_BY(mu);
};

namespace {

class InProcessWatchStream final : public WatchStream {
 public:
  using State = InProcessClient::Streams::StreamState;
  InProcessWatchStream(CoordinationService* service, std::shared_ptr<InProcessClient::Streams> streams,
                       std::shared_ptr<State> state)
      : service_(service), streams_(std::move(streams)), state_(std::move(state)) {}
  ~InProcessWatchStream() override {
    // Destroyed without cancel(): the "connection" is lost, as when a process dies.
    close(/*lost=*/true, absl::UnavailableError("[watch] stream destroyed"));
  }
  absl::StatusOr<JobState> next(absl::Duration timeout) override {
    MutexLock lock(&state_->mu);
    State* s = state_.get();
    auto ready = [s]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !s->end.ok() || (s->latest && (!s->any_returned || s->latest->version > s->returned_version));
    };
    if (!s->mu.await_for(ready, timeout)) {
      return absl::DeadlineExceededError("[watch] no job state change within the timeout");
    }
    if (s->latest && (!s->any_returned || s->latest->version > s->returned_version)) {
      s->any_returned = true;
      s->returned_version = s->latest->version;
      return *s->latest;
    }
    return s->end;
  }
  void cancel() override { close(/*lost=*/false, absl::CancelledError("[watch] the stream was cancelled")); }

  // Ends the subscription (idempotent).
  static void close_state(CoordinationService* service, const std::shared_ptr<State>& state, bool lost,
                          absl::Status why) {
    {
      MutexLock lock(&state->mu);
      if (state->closed) return;
      state->closed = true;
    }
    service->end_watch(state->watch_id, lost);
    MutexLock lock(&state->mu);
    state->end = std::move(why);
  }

 private:
  void close(bool lost, absl::Status why) {
    close_state(service_, state_, lost, std::move(why));
    MutexLock lock(&streams_->mu);
    streams_->open.erase(state_);
  }
  CoordinationService* service_;
  std::shared_ptr<InProcessClient::Streams> streams_;
  std::shared_ptr<State> state_;
};

}  // namespace

InProcessClient::InProcessClient(CoordinationService* service)
    : service_(service), streams_(std::make_shared<Streams>()) {}

InProcessClient::~InProcessClient() = default;

void InProcessClient::simulate_connection_loss() {
  std::set<std::shared_ptr<Streams::StreamState>> open;
  {
    MutexLock lock(&streams_->mu);
    open = streams_->open;
  }
  for (const auto& s : open) {
    InProcessWatchStream::close_state(service_, s, /*lost=*/true,
                                      absl::UnavailableError("lost the coordination service at in-process "
                                                             "(simulated connection loss)"));
  }
}

absl::StatusOr<RegisterResult> InProcessClient::register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                              absl::Duration timeout) {
  Waiter<absl::StatusOr<RegisterResult>> w;
  service_->register_task(task, incarnation, num_tasks, timeout, w.callback());
  return w.wait("register_task", timeout);
}

absl::StatusOr<Incarnation> InProcessClient::heartbeat(TaskId task, Incarnation incarnation, absl::Duration) {
  absl::Status s = service_->heartbeat(task, incarnation);
  if (!s.ok()) return s;
  return service_->service_incarnation();
}

absl::Status InProcessClient::report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                                           absl::Duration) {
  return service_->report_error(task, incarnation, error);
}

absl::Status InProcessClient::shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) {
  Waiter<absl::Status> w;
  service_->shutdown_task(task, incarnation, w.callback());
  return w.wait("shutdown_task", std::max(timeout, service_->options().shutdown_timeout));
}

absl::StatusOr<std::unique_ptr<WatchStream>> InProcessClient::watch(TaskId task, Incarnation incarnation,
                                                                    absl::Duration) {
  auto state = std::make_shared<Streams::StreamState>();
  absl::StatusOr<uint64_t> id = service_->watch(task, incarnation, [state](const JobState& s) {
    MutexLock lock(&state->mu);
    state->latest = s;
  });
  if (!id.ok()) return id.status();
  state->watch_id = *id;
  {
    MutexLock lock(&streams_->mu);
    streams_->open.insert(state);
  }
  return std::unique_ptr<WatchStream>(new InProcessWatchStream(service_, streams_, state));
}

absl::Status InProcessClient::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                                        absl::Duration) {
  return service_->kv_insert(key, value, allow_overwrite);
}

absl::StatusOr<std::string> InProcessClient::kv_get(std::string_view key, absl::Duration timeout) {
  Waiter<absl::StatusOr<std::string>> w;
  service_->kv_get(key, timeout, w.callback());
  return w.wait("kv_get", timeout);
}

absl::StatusOr<std::string> InProcessClient::kv_try_get(std::string_view key, absl::Duration) {
  return service_->kv_try_get(key);
}

absl::StatusOr<int64_t> InProcessClient::kv_increment(std::string_view key, int64_t delta, absl::Duration) {
  return service_->kv_increment(key, delta);
}

absl::StatusOr<std::vector<KeyValue>> InProcessClient::kv_dir(std::string_view dir, absl::Duration) {
  return service_->kv_dir(dir);
}

absl::StatusOr<int64_t> InProcessClient::kv_delete(std::string_view key, absl::Duration) {
  return static_cast<int64_t>(service_->kv_delete(key));
}

absl::Status InProcessClient::barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                                      const std::vector<TaskId>& tasks, absl::Duration timeout) {
  Waiter<absl::Status> w;
  service_->barrier(task, incarnation, name, counter, tasks, timeout, w.callback());
  return w.wait("barrier", timeout);
}

absl::Status InProcessClient::cancel_barrier(std::string_view name, int64_t counter, absl::Duration) {
  return service_->cancel_barrier(name, counter);
}

absl::StatusOr<LiveTasks> InProcessClient::get_live_tasks(TaskId task, Incarnation incarnation,
                                                          const LiveSetRequest& request, absl::Duration timeout) {
  Waiter<absl::StatusOr<LiveTasks>> w;
  service_->get_live_tasks(task, incarnation, request, timeout, w.callback());
  return w.wait("get_live_tasks", timeout);
}

absl::StatusOr<ServiceStatus> InProcessClient::status(absl::Duration) { return service_->status(); }

}  // namespace mcx::distributed
