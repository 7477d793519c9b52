// The per-process coordination agent: registers this process as task `task_id`, heartbeats, watches the
// job for failures, and offers the key-value store, barriers and live-set agreement to the program.
//
// Threads: connect() starts two threads, both joined by shutdown() or the destructor (never detached):
//   - heartbeat: every heartbeat_interval sends a heartbeat (deadline = interval). If heartbeats fail for
//     longer than heartbeat_timeout (the coordinator is gone or hung), or the service incarnation
//     changes (the coordinator restarted), the coordinator is lost (below);
//   - watcher: holds the watch stream open (the service monitors this process through it) and compares
//     each job state with the last: a task that became ERROR, a job error, or the stream breaking
//     (coordinator died) are reported. In a recoverable job it also rejoins a restarted coordinator.
// Losing the coordinator (its watch stream breaks, heartbeats fail for heartbeat_timeout, or a heartbeat finds a
// service that does not know this task or has another incarnation):
//   - fate-sharing (default): fatal at once, "lost the coordination service at ADDR: ...";
//   - recoverable (AgentOptions::recoverable): the watcher thread rejoins the coordinator at the same address
//     (CoordinationService::rejoin_task: same incarnation, and the newest live-set generation this agent saw),
//     retrying with backoff (50 ms doubling to 1 s) for up to reconnect_timeout; then it re-opens the watch
//     stream, re-publishes every key-value entry this agent wrote (kv_insert) and did not delete, and heartbeats
//     resume; the new service incarnation is accepted on this path only. Calls in flight or made meanwhile wait
//     for the rejoin and are retried within their own deadline (a barrier with the same instance counter; a
//     live-set agreement with the same request). If the coordinator does not come back within
//     reconnect_timeout, or refuses the rejoin (for example this task was failed meanwhile), the loss is fatal:
//     "lost the coordination service at ADDR: could not rejoin it within 60s (...)", and later calls fail with
//     that error. What a restart loses: docs/fault_tolerance.md, "The coordinator can restart".
// Failure handling: with no callback (default, fate-sharing) a fatal event is logged as
//   "[mcx.distributed] task 3 failed: <why>; terminating task 1 (fate-sharing)"
// and the process exits with kFailureExitCode via std::_Exit (no destructors: other threads may be blocked
// in collectives). With on_failure set, the callback runs on the watcher or heartbeat thread instead and
// the agent keeps running (the program decides); it is invoked once per failed (task, incarnation) and
// once for a lost coordinator. In recoverable mode on_membership_change reports every job state change.
//
// Thread-safety: all methods are thread-safe after connect(); connect() and shutdown() are called once
// each (shutdown is idempotent).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/coordination/client.h"

namespace mcx::distributed {

// Exit code of a process that terminates because another task failed (or the coordinator was lost).
inline constexpr int kFailureExitCode = 43;

// What went wrong, as given to AgentOptions::on_failure.
struct TaskFailure {
  TaskId task = -1;             // the failed task; -1 for the coordinator itself
  Incarnation incarnation = 0;
  absl::Status error;           // its error, e.g. UNAVAILABLE "connection to task 3 lost ..."
  std::string message;          // one line: "task 3 failed: ..." / "lost the coordination service: ..."
};

struct AgentOptions {
  TaskId task_id = 0;
  int num_tasks = 1;
  Incarnation incarnation = 0;  // 0 = random_incarnation()
  // How long connect() waits for every task to register (and to reach the coordinator at all).
  absl::Duration init_timeout = absl::Seconds(60);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // The agent treats the coordinator as lost after this long without a successful heartbeat. Should
  // match the service's heartbeat_timeout.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Deadline of the shutdown barrier as seen by this agent.
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // Deadline of non-blocking RPCs (kv_insert, kv_try_get, ...).
  absl::Duration rpc_timeout = absl::Seconds(10);
  // The job is recoverable: a lost coordinator is rejoined (see above) instead of ending this process. Should
  // match the service's mode (a fate-sharing service refuses rejoins).
  bool recoverable = false;
  // Recoverable mode: how long the agent tries to rejoin a lost coordinator before the loss is fatal.
  absl::Duration reconnect_timeout = absl::Seconds(60);
  // nullptr = log and exit (fate-sharing). Called at most once per failure, on an agent thread.
  std::function<void(const TaskFailure&)> on_failure;
  // Called with each new job state (membership changes, also in recoverable mode). Agent thread.
  std::function<void(const JobState&)> on_job_state;
  // Entries connect() writes (overwriting) before it registers, as kv_insert would: they are in the store by the
  // time every task has registered, so the others read them without waiting (the job's topology).
  std::vector<KeyValue> publish_on_connect;
};

class CoordinationAgent {
 public:
  // Takes ownership of the client. Does no I/O.
  CoordinationAgent(std::unique_ptr<CoordinationClient> client, AgentOptions options);
  ~CoordinationAgent();  // shutdown() without the barrier if still connected; joins threads

  // Writes options.publish_on_connect, registers (retrying UNAVAILABLE until init_timeout, so processes may
  // start before the coordinator), waits for all tasks, opens the watch stream and starts the threads. Errors: DEADLINE_EXCEEDED naming
  // the tasks that did not register, or "cannot reach the coordination service at ADDR" when it never
  // answered; the service's register errors (duplicate id, mismatched count, ...).
  absl::Status connect();

  // Leaves the job: shutdown barrier (see CoordinationService::shutdown_task), then stops and joins the
  // threads and closes the stream. Returns the barrier's outcome. Idempotent.
  absl::Status shutdown();

  // Reports a fatal error of this process to the service (propagated to the others unless recoverable).
  // This agent does not treat the resulting failure of its own task as news (no on_failure / exit for
  // it); the program decides how to end.
  absl::Status report_error(const absl::Status& error);

  TaskId task_id() const { return options_.task_id; }
  int num_tasks() const { return options_.num_tasks; }
  Incarnation incarnation() const { return options_.incarnation; }
  bool connected() const;
  CoordinationClient* client() { return client_.get(); }
  // The incarnation of the coordination service this agent is registered with (it changes when it rejoins a
  // restarted coordinator), and how many times it has rejoined one.
  Incarnation service_incarnation() const;
  int rejoins() const;

  // Key-value store (see CoordinationService). `timeout` of kv_get is how long to wait for the key. In a
  // recoverable job the agent keeps a copy of every entry kv_insert wrote (until kv_delete removes it or a key
  // above it) and writes it again after rejoining a restarted coordinator.
  absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite = false);
  // kv_insert without waiting for the service's acknowledgement, where the transport pipelines (the gRPC
  // client's fast path; elsewhere it is kv_insert without retries): thousands of inserts cost one round trip.
  // Every later call of this agent sees the insert applied. An insert's error is returned by a later
  // kv_insert_async, by the agent's next key-value / barrier / live-set call, or by kv_flush, once; shutdown()
  // flushes first. A recoverable agent remembers the entry (as kv_insert) before sending it.
  absl::Status kv_insert_async(std::string_view key, std::string_view value, bool allow_overwrite = false);
  // Waits up to `timeout` until every kv_insert_async insert was applied; the first error among them.
  absl::Status kv_flush(absl::Duration timeout);
  absl::StatusOr<std::string> kv_get(std::string_view key, absl::Duration timeout);
  absl::StatusOr<std::string> kv_try_get(std::string_view key);
  absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta);
  absl::StatusOr<std::vector<KeyValue>> kv_dir(std::string_view dir);
  absl::StatusOr<int64_t> kv_delete(std::string_view key);

  // Named reusable barrier: the n-th call with a name on this agent joins instance n. `tasks` empty =
  // all tasks. Outcome identical for every participant (see CoordinationService::barrier).
  absl::Status barrier(std::string_view name, absl::Duration timeout, const std::vector<TaskId>& tasks = {});
  // Cancels this agent's next (or current) instance of `name`.
  absl::Status cancel_barrier(std::string_view name);

  // Live-set agreement (see CoordinationService::get_live_tasks): over request.tasks (empty = all), named,
  // with this task's payload delivered to every caller.
  absl::StatusOr<LiveTasks> get_live_tasks(const LiveSetRequest& request, absl::Duration timeout);

  // The newest job state the watcher has seen.
  JobState last_job_state() const;

 private:
  struct Impl;
  std::unique_ptr<CoordinationClient> client_;
  AgentOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcx::distributed
