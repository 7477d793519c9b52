#include "mcx/distributed/coordination/client.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"

namespace mcx::distributed {
namespace {

absl::Status unreachable(std::string_view api) {
  return absl::UnavailableError(absl::StrCat("[", std::string(api),
                                             "] cannot reach the coordination service at in-process: it is down"));
}

// The answer of a service callback; the callback may run after the waiter gave up, or never (the endpoint then
// abandons the call).
template <typename T>
struct Answer {
  Mutex mu;
  std::optional<T> value ABSL_GUARDED_BY(mu);
  void set(T v) {
    MutexLock lock(&mu);
    if (!value) value.emplace(std::move(v));
  }
  T wait(std::string_view api, absl::Duration timeout) {
    MutexLock lock(&mu);
    auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return value.has_value(); };
    if (!mu.await_for(ready, timeout + kRpcGrace)) {
      return T(absl::DeadlineExceededError(absl::StrCat("[", std::string(api), "] no answer from the in-process "
                                                        "coordination service within ",
                                                        absl::FormatDuration(timeout + kRpcGrace))));
    }
    return std::move(*value);
  }
};

}  // namespace

struct InProcessEndpoint::State {
  // One open watch stream.
  struct Stream {
    Mutex mu;
    std::optional<JobState> latest ABSL_GUARDED_BY(mu);
    uint64_t returned_version ABSL_GUARDED_BY(mu) = 0;
    bool any_returned ABSL_GUARDED_BY(mu) = false;
    absl::Status end ABSL_GUARDED_BY(mu);          // non-OK once ended
    bool closed ABSL_GUARDED_BY(mu) = false;       // `end` is set
    bool watch_ended ABSL_GUARDED_BY(mu) = false;  // end_watch was called (or is being called)
    // Set before the stream is published in `streams`.
    uint64_t watch_id = 0;
    uint64_t epoch = 0;          // the service it was opened on (State::epoch at that time)
    const void* owner = nullptr;  // the client that opened it
  };

  Mutex mu;
  CoordinationService* service ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t epoch ABSL_GUARDED_BY(mu) = 0;  // +1 per disconnect
  int in_use ABSL_GUARDED_BY(mu) = 0;      // calls into `service` running now (disconnect waits for them)
  std::set<std::shared_ptr<Stream>> streams ABSL_GUARDED_BY(mu);
  std::map<uint64_t, std::function<void()>> pending ABSL_GUARDED_BY(mu);  // waiting calls: abandon them
  uint64_t next_pending ABSL_GUARDED_BY(mu) = 0;

  // Runs f(service, epoch) with the service pinned, or returns UNAVAILABLE when the endpoint is down.
  template <typename F>
  auto with_service(std::string_view api, F&& f) -> decltype(f(nullptr, uint64_t{0})) {
    using R = decltype(f(nullptr, uint64_t{0}));
    CoordinationService* s;
    uint64_t e;
    {
      MutexLock lock(&mu);
      if (service == nullptr) return R(unreachable(api));
      s = service;
      e = epoch;
      ++in_use;
    }
    R r = f(s, e);
    MutexLock lock(&mu);
    --in_use;
    return r;
  }

  // A call that waits inside the service: `start` starts it with a callback and returns how long to wait for it.
  template <typename T>
  T wait_call(std::string_view api,
              const std::function<absl::Duration(CoordinationService*, Callback<T>)>& start) {
    auto answer = std::make_shared<Answer<T>>();
    CoordinationService* s;
    uint64_t id;
    {
      MutexLock lock(&mu);
      if (service == nullptr) return T(unreachable(api));
      s = service;
      ++in_use;
      id = next_pending++;
      pending[id] = [answer, a = std::string(api)] {
        answer->set(T(absl::UnavailableError(absl::StrCat(
            "[", a, "] lost the coordination service at in-process (it went away while the call waited)"))));
      };
    }
    absl::Duration wait = start(s, [answer](T v) { answer->set(std::move(v)); });
    {
      MutexLock lock(&mu);
      --in_use;
    }
    T r = answer->wait(api, wait);
    MutexLock lock(&mu);
    pending.erase(id);
    return r;
  }

  // Ends a stream (idempotent): tells the service it was opened on, unless that service is gone (disconnect()
  // ends the watches of the old service itself).
  void close_stream(const std::shared_ptr<Stream>& st, bool lost, absl::Status why) {
    CoordinationService* s = nullptr;
    {
      MutexLock lock(&mu);
      if (service != nullptr && st->epoch == epoch) {
        s = service;
        ++in_use;
      }
      streams.erase(st);
    }
    if (s != nullptr) {
      bool end_it;
      {
        MutexLock lock(&st->mu);
        end_it = !st->watch_ended;
        st->watch_ended = true;
      }
      if (end_it) s->end_watch(st->watch_id, lost);
      MutexLock lock(&mu);
      --in_use;
    }
    MutexLock lock(&st->mu);
    if (st->closed) return;
    st->closed = true;
    st->end = std::move(why);
  }
};

InProcessEndpoint::InProcessEndpoint(CoordinationService* service) : state_(std::make_shared<State>()) {
  MutexLock lock(&state_->mu);
  state_->service = service;
}

InProcessEndpoint::~InProcessEndpoint() = default;

void InProcessEndpoint::disconnect() {
  CoordinationService* old;
  std::set<std::shared_ptr<State::Stream>> streams;
  std::map<uint64_t, std::function<void()>> pending;
  {
    MutexLock lock(&state_->mu);
    if (state_->service == nullptr) return;
    old = state_->service;
    state_->service = nullptr;
    ++state_->epoch;
    State* s = state_.get();
    state_->mu.await([s]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->in_use == 0; });
    streams.swap(state_->streams);
    pending.swap(state_->pending);
  }
  for (auto& [id, abandon] : pending) abandon();
  for (const auto& st : streams) {
    bool end_it;
    {
      MutexLock lock(&st->mu);
      end_it = !st->watch_ended;
      st->watch_ended = true;
    }
    if (end_it) old->end_watch(st->watch_id, /*connection_lost=*/false);
    MutexLock lock(&st->mu);
    if (!st->closed) {
      st->closed = true;
      st->end = absl::UnavailableError(
          "lost the coordination service at in-process (watch stream ended: the coordinator went away)");
    }
  }
}

void InProcessEndpoint::connect(CoordinationService* service) {
  MutexLock lock(&state_->mu);
  state_->service = service;
}

namespace {

class InProcessWatchStream final : public WatchStream {
 public:
  using Stream = InProcessEndpoint::State::Stream;
  InProcessWatchStream(std::shared_ptr<InProcessEndpoint::State> endpoint, std::shared_ptr<Stream> stream)
      : endpoint_(std::move(endpoint)), stream_(std::move(stream)) {}
  ~InProcessWatchStream() override {
    // Destroyed without cancel(): the "connection" is lost, as when a process dies.
    endpoint_->close_stream(stream_, /*lost=*/true, absl::UnavailableError("[watch] stream destroyed"));
  }
  absl::StatusOr<JobState> next(absl::Duration timeout) override {
    Stream* s = stream_.get();
    MutexLock lock(&s->mu);
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
  void cancel() override {
    endpoint_->close_stream(stream_, /*lost=*/false, absl::CancelledError("[watch] the stream was cancelled"));
  }

 private:
  std::shared_ptr<InProcessEndpoint::State> endpoint_;
  std::shared_ptr<Stream> stream_;
};

}  // namespace

InProcessClient::InProcessClient(CoordinationService* service) : InProcessClient(InProcessEndpoint(service)) {}

InProcessClient::InProcessClient(const InProcessEndpoint& endpoint) : endpoint_(endpoint.state_) {}

InProcessClient::~InProcessClient() = default;

void InProcessClient::simulate_connection_loss() {
  std::vector<std::shared_ptr<InProcessEndpoint::State::Stream>> mine;
  {
    MutexLock lock(&endpoint_->mu);
    for (const auto& s : endpoint_->streams) {
      if (s->owner == this) mine.push_back(s);
    }
  }
  for (const auto& s : mine) {
    endpoint_->close_stream(s, /*lost=*/true,
                            absl::UnavailableError("lost the coordination service at in-process (simulated "
                                                   "connection loss)"));
  }
}

absl::StatusOr<RegisterResult> InProcessClient::register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                              absl::Duration timeout) {
  return endpoint_->wait_call<absl::StatusOr<RegisterResult>>(
      "register_task", [&](CoordinationService* s, Callback<absl::StatusOr<RegisterResult>> done) {
        s->register_task(task, incarnation, num_tasks, timeout, std::move(done));
        return timeout;
      });
}

absl::StatusOr<RegisterResult> InProcessClient::rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                            uint64_t live_set_generation,
                                                            const std::vector<PassedBarrier>& passed_barriers,
                                                            absl::Duration) {
  return endpoint_->with_service("rejoin_task", [&](CoordinationService* s, uint64_t) {
    return s->rejoin_task(task, incarnation, num_tasks, live_set_generation, passed_barriers);
  });
}

absl::StatusOr<HeartbeatReply> InProcessClient::heartbeat(TaskId task, Incarnation incarnation, absl::Duration) {
  return endpoint_->with_service("heartbeat", [&](CoordinationService* s, uint64_t) -> absl::StatusOr<HeartbeatReply> {
    absl::Status st = s->heartbeat(task, incarnation);
    if (!st.ok()) return st;
    return HeartbeatReply{s->service_incarnation(), profiler::trace_clock_us()};
  });
}

absl::Status InProcessClient::report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                                           absl::Duration) {
  return endpoint_->with_service("report_error", [&](CoordinationService* s, uint64_t) {
    return s->report_error(task, incarnation, error);
  });
}

absl::Status InProcessClient::shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) {
  return endpoint_->wait_call<absl::Status>("shutdown_task", [&](CoordinationService* s, Callback<absl::Status> done) {
    s->shutdown_task(task, incarnation, std::move(done));
    return std::max(timeout, s->options().shutdown_timeout);
  });
}

absl::StatusOr<std::unique_ptr<WatchStream>> InProcessClient::watch(TaskId task, Incarnation incarnation,
                                                                    absl::Duration) {
  using Stream = InProcessEndpoint::State::Stream;
  auto st = std::make_shared<Stream>();
  st->owner = this;
  return endpoint_->with_service(
      "watch", [&](CoordinationService* s, uint64_t epoch) -> absl::StatusOr<std::unique_ptr<WatchStream>> {
        absl::StatusOr<uint64_t> id = s->watch(task, incarnation, [st](const std::shared_ptr<const JobStateSnapshot>& js) {
          MutexLock lock(&st->mu);
          st->latest = js->state();
        });
        if (!id.ok()) return id.status();
        st->watch_id = *id;
        st->epoch = epoch;
        {
          MutexLock lock(&endpoint_->mu);
          endpoint_->streams.insert(st);
        }
        return std::unique_ptr<WatchStream>(new InProcessWatchStream(endpoint_, st));
      });
}

absl::Status InProcessClient::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                                        absl::Duration) {
  return endpoint_->with_service("kv_insert", [&](CoordinationService* s, uint64_t) {
    return s->kv_insert(key, value, allow_overwrite, Caller::trusted());
  });
}

absl::StatusOr<std::string> InProcessClient::kv_get(std::string_view key, absl::Duration timeout) {
  return endpoint_->wait_call<absl::StatusOr<std::string>>(
      "kv_get", [&](CoordinationService* s, Callback<absl::StatusOr<std::string>> done) {
        s->kv_get(key, timeout, std::move(done));
        return timeout;
      });
}

absl::StatusOr<std::string> InProcessClient::kv_try_get(std::string_view key, absl::Duration) {
  return endpoint_->with_service("kv_try_get", [&](CoordinationService* s, uint64_t) { return s->kv_try_get(key); });
}

absl::StatusOr<int64_t> InProcessClient::kv_increment(std::string_view key, int64_t delta, absl::Duration) {
  return endpoint_->with_service("kv_increment",
                                 [&](CoordinationService* s, uint64_t) { return s->kv_increment(key, delta, Caller::trusted()); });
}

absl::StatusOr<std::vector<KeyValue>> InProcessClient::kv_dir(std::string_view dir, absl::Duration) {
  return endpoint_->with_service("kv_dir", [&](CoordinationService* s, uint64_t) {
    return absl::StatusOr<std::vector<KeyValue>>(s->kv_dir(dir));
  });
}

absl::StatusOr<int64_t> InProcessClient::kv_delete(std::string_view key, absl::Duration) {
  return endpoint_->with_service("kv_delete", [&](CoordinationService* s, uint64_t) -> absl::StatusOr<int64_t> {
    MCX_ASSIGN_OR_RETURN(size_t n, s->kv_delete(key, Caller::trusted()));
    return static_cast<int64_t>(n);
  });
}

absl::Status InProcessClient::barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                                      const std::vector<TaskId>& tasks, absl::Duration timeout) {
  return endpoint_->wait_call<absl::Status>("barrier", [&](CoordinationService* s, Callback<absl::Status> done) {
    s->barrier(task, incarnation, name, counter, tasks, timeout, std::move(done));
    return timeout;
  });
}

absl::Status InProcessClient::end_job(std::string_view reason, absl::Duration) {
  return endpoint_->with_service("end_job", [&](CoordinationService* s, uint64_t) { return s->end_job(reason, Caller::trusted()); });
}

absl::Status InProcessClient::cancel_barrier(std::string_view name, int64_t counter, absl::Duration) {
  return endpoint_->with_service("cancel_barrier",
                                 [&](CoordinationService* s, uint64_t) { return s->cancel_barrier(name, counter, Caller::trusted()); });
}

absl::StatusOr<LiveTasks> InProcessClient::get_live_tasks(TaskId task, Incarnation incarnation,
                                                          const LiveSetRequest& request, absl::Duration timeout) {
  return endpoint_->wait_call<absl::StatusOr<LiveTasks>>(
      "get_live_tasks", [&](CoordinationService* s, Callback<absl::StatusOr<LiveTasks>> done) {
        s->get_live_tasks(task, incarnation, request, timeout, std::move(done));
        return timeout;
      });
}

absl::StatusOr<ServiceStatus> InProcessClient::status(absl::Duration) {
  return endpoint_->with_service("status",
                                 [&](CoordinationService* s, uint64_t) { return absl::StatusOr<ServiceStatus>(s->status()); });
}

}  // namespace mcx::distributed
