// Private to the coordination agent's .cc files: the state behind CoordinationAgent (see coordination/agent.h
// for the semantics). coordination_agent.cc: connect, shutdown, the calls, the heartbeat and watcher threads;
// coordination_agent_rejoin.cc: rejoining a restarted coordinator (recoverable jobs) and retrying the calls
// that the loss interrupted.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination/agent.h"

namespace mcx::distributed {

struct CoordinationAgent::Impl {
  // The link to the coordination service. kRejoining only in recoverable mode, between noticing the loss and
  // rejoining; kLost once the loss is fatal (link_error says why).
  enum class Link { kUp, kRejoining, kLost };
  struct OwnedEntry {
    std::string value;
    bool allow_overwrite = false;
  };
  static constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
  static constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
  static constexpr absl::Duration kRejoinAttempt = absl::Seconds(2);  // deadline of one rejoin attempt

  CoordinationAgent* self;
  mutable Mutex mu;
  bool connected ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  CondVar stop_cv;  // signalled (with mu held) when stopping becomes true; the heartbeat thread sleeps on it
  bool shut_down ABSL_GUARDED_BY(mu) = false;
  // shutdown() has begun: a coordinator lost from now on is that call's error, not a failure of the task (the
  // coordinator of a finished job exits as soon as the last task's shutdown completes, and its connection may
  // close before this task has read the reply).
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  absl::Status shutdown_result ABSL_GUARDED_BY(mu);
  Incarnation service_incarnation ABSL_GUARDED_BY(mu) = 0;
  JobState last_state ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t> barrier_counters ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t> barrier_passed ABSL_GUARDED_BY(mu);  // newest instance passed, per barrier (rejoin)
  std::map<std::string, int64_t> barrier_in_flight ABSL_GUARDED_BY(mu);
  std::set<std::pair<TaskId, Incarnation>> reported ABSL_GUARDED_BY(mu);
  bool coordinator_loss_reported ABSL_GUARDED_BY(mu) = false;
  bool job_error_reported ABSL_GUARDED_BY(mu) = false;
  bool self_reported_error ABSL_GUARDED_BY(mu) = false;  // report_error() was called: our ERROR is no news

  Link link ABSL_GUARDED_BY(mu) = Link::kUp;
  uint64_t link_epoch ABSL_GUARDED_BY(mu) = 0;  // +1 per rejoin (rejoins())
  absl::Status link_error ABSL_GUARDED_BY(mu);  // kLost: why
  absl::Time rejoining_since ABSL_GUARDED_BY(mu);
  // The heartbeat thread asks the watcher thread to rejoin (it cancels the stream to wake it).
  bool rejoin_requested ABSL_GUARDED_BY(mu) = false;
  absl::Status rejoin_reason ABSL_GUARDED_BY(mu);
  uint64_t live_set_generation ABSL_GUARDED_BY(mu) = 0;  // the newest one get_live_tasks returned
  std::map<std::string, OwnedEntry> owned ABSL_GUARDED_BY(mu);  // recoverable: what kv_insert wrote

  std::shared_ptr<WatchStream> stream ABSL_GUARDED_BY(mu);
  std::thread heartbeat_thread, watcher_thread;

  const AgentOptions& options() const { return self->options_; }
  CoordinationClient& client() const { return *self->client_; }
  bool is_stopping() const {
    MutexLock lock(&mu);
    return stopping;
  }

  // coordination_agent.cc
  void fail(TaskFailure f);
  void coordinator_lost(const absl::Status& why);
  void on_state(const JobState& s);
  void heartbeat_loop();
  void watch_loop();
  void stop_threads();

  // coordination_agent_rejoin.cc
  // Heartbeat thread: the link of `epoch` looks lost; wakes the watcher thread to rejoin (once per epoch).
  void request_rejoin(absl::Status why, uint64_t epoch);
  // Watcher thread: rejoins, re-opens the watch stream and re-publishes the owned entries. Returns the new
  // stream, or nullptr when stopping or when the loss became fatal (reported through fail()).
  std::shared_ptr<WatchStream> rejoin(absl::Status why);
  // Writes the owned entries again; the number written. Errors: a retryable one (the service went away again).
  absl::StatusOr<int> republish(absl::Time deadline);
  void remember(std::string_view key, std::string_view value, bool allow_overwrite);
  void forget(std::string_view key);  // the key and every key under key/
  // A call failed with `s` while the link had `epoch`: was it because the coordinator went away?
  bool lost_link(const absl::Status& s, uint64_t epoch) const;
  // Waits while the agent is rejoining (until `deadline`). Returns the link epoch to call under, or the error
  // the call should return (the loss is fatal, or the deadline passed while rejoining).
  absl::StatusOr<uint64_t> await_link(std::string_view api, absl::Time deadline);
  // Waits for the link to change from `epoch` (a rejoin, or a fatal loss), up to `until`.
  void await_link_change(uint64_t epoch, absl::Time until);

  static const absl::Status& status_of(const absl::Status& s) { return s; }
  template <typename V>
  static const absl::Status& status_of(const absl::StatusOr<V>& s) {
    return s.status();
  }

  // Runs call(time left) and, in a recoverable job, retries it while it fails because the coordinator went away:
  // it waits for the rejoin, all within `timeout` (the caller's deadline). T is absl::Status or absl::StatusOr<V>.
  template <typename T>
  T retrying(std::string_view api, absl::Duration timeout, const std::function<T(absl::Duration)>& call) {
    if (!options().recoverable) return call(timeout);
    const absl::Time deadline = absl::Now() + timeout;
    absl::Duration backoff = kFirstBackoff;
    while (true) {
      absl::StatusOr<uint64_t> epoch = await_link(api, deadline);
      if (!epoch.ok()) return T(epoch.status());
      T r = call(std::max(absl::Milliseconds(1), deadline - absl::Now()));
      const absl::Status& s = status_of(r);
      if (s.ok() || absl::Now() >= deadline || is_stopping() || !lost_link(s, *epoch)) return r;
      await_link_change(*epoch, std::min(deadline, absl::Now() + backoff));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }
};

}  // namespace mcx::distributed
