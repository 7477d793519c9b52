// The coordination service: the control plane's state machine, independent of any transport.
//
// One instance serves one job of N tasks (processes), ids 0..N-1. It keeps:
//   - tasks: state (DISCONNECTED -> CONNECTED -> ERROR | SHUTDOWN), a random 64-bit incarnation chosen by
//     the task's process, the last heartbeat time and, when failed, the error;
//   - a key-value store (bytes values, ordered keys, size limits);
//   - named reusable barriers and live-set agreements (GetLiveTasks);
//   - a versioned job state that agents watch (a long-lived stream) to learn of failures and membership
//     changes at once.
// Semantics follow XLA/TSL's CoordinationService (xla/pjrt/distributed/coordination) with these changes:
// every blocking operation has a deadline; timeout errors name the missing tasks; failure detection is
// fast by default (1 s heartbeats, 10 s timeout, and a broken watch stream fails the task at once);
// GetLiveTasks has a deadline; a Status() snapshot exposes everything an operator needs.
//
// Blocking operations (register, barrier, get_live_tasks, blocking KV get, shutdown) are asynchronous:
// they take a callback that is invoked exactly once, from the calling thread (when the result is known at
// once), from another RPC's thread, or from the service's timer thread. Callbacks are never invoked with
// the service mutex held, so they may call back into the service; they must not block for long.
// Transports adapt them (gRPC callback API; the in-process client waits on its mutex), so a pending
// call never holds a server thread.
//
// Coordinator restarts (recoverable mode): a service that replaces a lost one (same address, new process) starts
// empty. The agents of the job rejoin it with their old incarnations (rejoin_task), and the service rebuilds the
// membership from them: see rejoin_task for what the first rejoin changes, and docs/fault_tolerance.md ("The
// coordinator can restart") for what state is lost.
//
// Time: the service reads time only through the injected Clock. Timeouts are durations measured on that
// clock from the moment the service receives the request (clocks of different hosts are never compared).
// A timer thread expires deadlines and checks heartbeats; with a ManualClock tests disable it
// (ServiceOptions::start_timer_thread = false) and call check_timeouts() after advancing the clock.
//
// Thread-safety: every public method is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/mutex.h"
#include "absl/time/time.h"

namespace mcx::distributed {

using TaskId = int32_t;
struct Principal;  // principal.h: who calls, when the gRPC edge binds identities
using Incarnation = uint64_t;

// A random non-zero 64-bit id (std::random_device), used for task and service incarnations.
Incarnation random_incarnation();

// The only source of time for the service. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time now() const = 0;
};

// absl::Now().
class SystemClock final : public Clock {
 public:
  absl::Time now() const override { return absl::Now(); }
  static SystemClock* get();  // process-wide instance
};

// A clock that moves only when told to (tests).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1'000'000)) : now_(start) {}
  absl::Time now() const override;
  void advance(absl::Duration d);

 private:
  mutable Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

enum class TaskState { kDisconnected, kConnected, kError, kShutdown };
std::string_view task_state_name(TaskState s);  // "DISCONNECTED", "CONNECTED", "ERROR", "SHUTDOWN"

// One task as the job sees it (an element of JobState).
struct TaskInfo {
  TaskId id = 0;
  Incarnation incarnation = 0;  // 0 until it first registers
  TaskState state = TaskState::kDisconnected;
  absl::Status error;           // why it failed, when state == kError
  bool operator==(const TaskInfo&) const = default;
};

// What a watch delivers: the whole job state at one version. Versions increase by one per change; a
// watcher may skip versions (it always gets the newest) and may see the same task state twice.
// `job_error` is set once a failure is fate-shared (non-recoverable mode), or an admin ended the job (end_job):
// every task must stop.
struct JobState {
  uint64_t version = 0;
  Incarnation service_incarnation = 0;
  std::vector<TaskInfo> tasks;  // indexed by task id
  absl::Status job_error;       // OK unless the job as a whole failed
};

struct ServiceOptions {
  int num_tasks = 1;
  // A task whose last heartbeat is older than this is failed (UNAVAILABLE "stopped sending heartbeats").
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Shutdown barrier: each task's shutdown waits for all tasks, up to this long (0 = no barrier: tasks
  // leave alone). Ignored in recoverable mode (tasks leave alone).
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // false (default): fate-sharing. The first failure of any task becomes the job error, every watcher
  // is told which task failed and why, pending barriers/live-set calls fail, and a task that registers
  // again with a new incarnation is refused.
  // true: failures are only membership changes. Pending barriers the failed task takes part in fail at once
  // (ABORTED, naming it; so do new ones until it registers again), live sets are recomputed, and a restarted
  // task (new incarnation) may register again.
  bool recoverable = false;
  // Recoverable jobs whose launcher restarts failed tasks (mcx-run --max-restarts): a failed task is expected
  // back with a new incarnation, so it leaves the pending barriers it arrived at and they wait for it (its
  // restart) until their deadline, instead of failing at once.
  bool failed_tasks_restart = false;
  // Key-value limits: InvalidArgument when a key/value is larger, ResourceExhausted when the store would
  // exceed max_total_bytes.
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = 4 << 20;  // fits gRPC's default 4 MiB message limit with headroom
  size_t max_total_bytes = size_t{1} << 30;
  // Quotas of what one task may own (keys it inserted under identity binding, principal.h): ResourceExhausted
  // naming the task, the quota and its flag beyond them. Unset: MCX_KV_MAX_KEYS_PER_TASK (100000) and
  // MCX_KV_MAX_BYTES_PER_TASK (256 MiB).
  std::optional<int64_t> max_keys_per_task = std::nullopt;
  std::optional<int64_t> max_bytes_per_task = std::nullopt;
  const Clock* clock = nullptr;     // nullptr = SystemClock::get()
  bool start_timer_thread = true;   // false with a ManualClock; then call check_timeouts()
};

// One barrier in flight, for status().
struct BarrierStatus {
  std::string name;
  int64_t counter = 0;
  std::vector<TaskId> arrived;
  std::vector<TaskId> missing;
  absl::Duration age;      // since the first arrival
  absl::Duration timeout;  // fixed by the first arrival
};

struct TaskStatus {
  TaskInfo info;
  std::optional<absl::Duration> last_heartbeat_age;  // nullopt before the first registration
  bool watching = false;  // it has a live watch stream (its connection is monitored)
  bool rejoined = false;  // it came back with rejoin_task (its incarnation predates this service)
};

// An operator's snapshot of the whole service.
struct ServiceStatus {
  Incarnation service_incarnation = 0;
  int num_tasks = 0;
  bool recoverable = false;
  absl::Duration heartbeat_timeout;
  uint64_t job_state_version = 0;
  absl::Status job_error;
  std::vector<TaskStatus> tasks;
  std::vector<BarrierStatus> barriers;  // in flight only
  size_t kv_keys = 0;
  size_t kv_bytes = 0;
  // The membership was rebuilt from rejoining tasks: this service replaced a coordinator that was lost.
  bool rebuilt = false;
  uint64_t live_set_generation = 0;  // the newest generation numbered (or the floor the rejoining tasks reported)
};

// A barrier instance a task had passed (rejoin_task).
struct PassedBarrier {
  std::string name;
  int64_t counter = 0;
};

struct RegisterResult {
  Incarnation service_incarnation = 0;
};

// What a live-set agreement is asked (get_live_tasks).
struct LiveSetRequest {
  std::vector<TaskId> tasks;  // the set to agree over; empty = all tasks
  // Agreements with different names are independent (each has its own pending call per set), so libraries
  // built on the agreement (live_devices, preemption sync) never meet each other's calls. "" is allowed.
  std::string name;
  // Delivered to every caller of the agreement, in LiveTasks::payloads (at most max_value_bytes).
  std::string payload;
};

struct LiveTasks {
  std::vector<TaskId> tasks;              // sorted
  std::vector<Incarnation> incarnations;  // parallel to tasks
  std::vector<std::string> payloads;      // parallel to tasks: what each caller sent
  // The number of this live set: the same for every caller of one agreement. It is job-wide and grows
  // (by one, across all names and sets) whenever an agreement over a (name, set) yields other members or
  // incarnations than the previous agreement over it; an agreement with the same members keeps the number.
  // So two agreements carry the same generation exactly when they agreed on the same live set, and a later
  // different set always has a larger number. A coordinator restart forgets the previous agreements: the first
  // one after it gets a new, larger number even over the same members (rejoin_task).
  uint64_t generation = 0;
  bool operator==(const LiveTasks&) const = default;
};

struct KeyValue {
  std::string key;
  std::string value;
  bool operator==(const KeyValue&) const = default;
};

template <typename T>
using Callback = std::function<void(T)>;

class CoordinationService {
 public:
  // Errors: InvalidArgument for num_tasks < 1 or non-positive timeouts.
  static absl::StatusOr<std::unique_ptr<CoordinationService>> create(ServiceOptions options);
  // Stops the timer thread and fails every pending call with ABORTED ("service stopping").
  ~CoordinationService();

  Incarnation service_incarnation() const { return service_incarnation_; }
  const ServiceOptions& options() const { return options_; }

  // --- Tasks ---------------------------------------------------------------------------------------

  // Registers task `task` of a job of `num_tasks` with `incarnation`; `done` runs once every task has
  // registered at least once, or with DEADLINE_EXCEEDED after `timeout`, naming the tasks that have not
  // registered. Registering again with the same incarnation is a no-op (a lost reply was retried).
  // Errors: InvalidArgument (task id outside [0, N), num_tasks != N, incarnation 0); ABORTED when the task is
  // already registered with another incarnation in fate-sharing mode (a duplicate process id, or a
  // restart the job cannot survive: the existing task is failed and the failure propagates);
  // FailedPrecondition when the job already failed or the task shut down.
  void register_task(TaskId task, Incarnation incarnation, int num_tasks, absl::Duration timeout,
                     Callback<absl::StatusOr<RegisterResult>> done);

  // A task of a recoverable job whose coordinator was lost rejoins this service (which replaced it) with the
  // incarnation it registered with before; answered at once, it does not wait for the other tasks. The task is
  // CONNECTED (its heartbeat clock starts now). The first rejoin tells the service that the job was assembled
  // before, so from then on: registration (of a restarted task) no longer waits for every task; heartbeats are
  // checked; live-set agreements complete only once no task is still expected back; and a task that has not
  // come back (rejoined, or registered with a new incarnation) heartbeat_timeout after the first rejoin is failed
  // with UNAVAILABLE "task N did not come back after the coordinator restarted ...", as any failed task (on_failure,
  // the data plane's failure watch). `live_set_generation` is the newest live-set generation the task saw: the
  // service numbers new live sets above the largest one reported, so generations keep growing across the restart.
  // Rejoining again with the same incarnation is a no-op (a retry). A rejoin is also accepted by a service that
  // still knows the task as CONNECTED with that incarnation (the service did not restart; the connection broke).
  // Errors: InvalidArgument (as register_task); FailedPrecondition when the service is not recoverable, when the
  // task is registered here with another incarnation (a restarted process took its place), or when it already
  // failed or shut down here (for example it came back after the grace above).
  // `passed_barriers`: the newest instance of each barrier the task had passed. An instance passes only once
  // every participant arrived, so the old service answered it to everyone, or died while answering: the others
  // may retry it here, where the task that passed it would never arrive again. Such an instance is completed
  // (OK) at once, for the participants waiting in it and for those that retry it later.
  absl::StatusOr<RegisterResult> rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                             uint64_t live_set_generation,
                                             const std::vector<PassedBarrier>& passed_barriers = {});

  // The transport reports that the registration call of `task` (with `incarnation`) ended before it was
  // answered: its process died or its connection broke while it waited for the other tasks. If the task is
  // still waiting to register with that incarnation, it fails with UNAVAILABLE "task N went away while
  // waiting for the other tasks to register" (fate-sharing: the job fails, and every other waiting
  // registration gets ABORTED naming it at once, instead of waiting out its timeout). Otherwise nothing happens.
  void registration_abandoned(TaskId task, Incarnation incarnation);

  // Refreshes the task's heartbeat. Errors: InvalidArgument (unknown id), FailedPrecondition (not
  // registered / wrong incarnation: "stale incarnation"), ABORTED (the task or the job already failed;
  // the message says why).
  absl::Status heartbeat(TaskId task, Incarnation incarnation);

  // The task reports a fatal error of its own: it becomes ERROR and, unless recoverable, the error
  // propagates to every task ("task 3 reported an error: <error>").
  absl::Status report_error(TaskId task, Incarnation incarnation, absl::Status error);

  // The task leaves. With a shutdown barrier (fate-sharing mode and shutdown_timeout > 0) `done` runs
  // when every task has called shutdown_task (OK) or fails for all with DEADLINE_EXCEEDED naming those
  // that did not. The task is SHUTDOWN afterwards either way, so its watch ending is not a failure.
  void shutdown_task(TaskId task, Incarnation incarnation, Callback<absl::Status> done);

  // --- Watching (failure notification and connection monitoring) ----------------------------------

  // Subscribes to the job state. `on_state` runs at once with the current state and then after every
  // change (never concurrently for one subscription; the newest state only). With task >= 0 the
  // subscription monitors that task's connection: when the transport reports the watch ended
  // (end_watch(id, connection_lost = true)) while the task is CONNECTED, the task fails with UNAVAILABLE
  // "connection to task N lost (process died or network failed)". task = -1 is an observer (mcx-ctl).
  // Errors: InvalidArgument (unknown task), FailedPrecondition (stale incarnation).
  absl::StatusOr<uint64_t> watch(TaskId task, Incarnation incarnation, Callback<const JobState&> on_state);
  // Ends a subscription; after it returns, its on_state is not running and will not run again.
  void end_watch(uint64_t watch_id, bool connection_lost);

  // The current job state (non-blocking).
  JobState job_state() const;

  // --- Key-value store ------------------------------------------------------------------------------
  // Keys are non-empty byte strings without NUL; "a/b" is in the directory "a". Values are bytes.

  // `caller` (the write calls and cancel_barrier): the identity the gRPC edge bound to the call, checked by
  // authorize_key (principal.h) with the key's owner, which the store records (the task that first wrote
  // it); nullptr: a trusted caller (in-process, or identity binding off), not checked and owning nothing.

  // Errors: AlreadyExists (key present and !allow_overwrite), InvalidArgument (empty/oversized key or
  // oversized value; the message gives both sizes and the limit), ResourceExhausted (store full),
  // PermissionDenied (caller).
  absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                         const Principal* caller = nullptr);
  // Runs `done` with the value once the key exists, or DEADLINE_EXCEEDED after `timeout`.
  void kv_get(std::string_view key, absl::Duration timeout, Callback<absl::StatusOr<std::string>> done);
  // NotFound when absent.
  absl::StatusOr<std::string> kv_try_get(std::string_view key);
  // Atomically adds `delta` to the decimal int64 stored at key (absent = 0) and returns the new value.
  // Errors: InvalidArgument when the stored value is not a decimal int64 or the sum overflows.
  absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta, const Principal* caller = nullptr);
  // Every entry whose key starts with `dir` + "/" (a trailing "/" on dir is allowed), in key order;
  // an empty `dir` lists every entry.
  std::vector<KeyValue> kv_dir(std::string_view dir);
  // Deletes `key` and every key under `key/`. Deleting nothing is OK. Returns the number deleted.
  // PermissionDenied (caller; naming the first key it may not delete) deletes nothing.
  absl::StatusOr<size_t> kv_delete(std::string_view key, const Principal* caller = nullptr);

  // --- Barriers -------------------------------------------------------------------------------------

  // Task `task` arrives at instance `counter` of barrier `name` (the agent counts its calls per name
  // from 0, so a name is reusable). `tasks` is the participant set (empty = all tasks). The first
  // arrival fixes the participant set and the deadline (now + timeout). `done` runs with the same
  // status for every participant: OK when all arrived; DEADLINE_EXCEEDED naming the missing tasks and
  // their last heartbeat ages; CANCELLED after cancel_barrier; InvalidArgument for everyone when a caller
  // names a different participant set or is not a participant; ABORTED when a participant failed (in either
  // failure mode: a barrier never waits for a task the service declared dead, unless failed_tasks_restart). A
  // call for an instance that already finished gets its stored result. Errors for the caller alone: FailedPrecondition (stale counter: an older instance than the current one; stale
  // incarnation), InvalidArgument (unknown task or participant id).
  void barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
               std::vector<TaskId> tasks, absl::Duration timeout, Callback<absl::Status> done);

  // Cancels instance `counter` of barrier `name`: its pending and future calls get CANCELLED.
  // FailedPrecondition if that instance already passed. A task `caller` may cancel only an instance in
  // flight that it takes part in; an admin any; PermissionDenied otherwise.
  absl::Status cancel_barrier(std::string_view name, int64_t counter, const Principal* caller = nullptr);
  // Ends the job (an admin's call under identity binding; PERMISSION_DENIED for any other role): the job error
  // becomes ABORTED "the job was ended by admin/root: <reason>", in either failure mode, so every task's watch
  // delivers it (fate-sharing tasks stop; recoverable ones hear it through on_failure), pending barriers and
  // registrations fail with it, and no task may register again. FAILED_PRECONDITION if the job failed already.
  absl::Status end_job(std::string_view reason, const Principal* caller = nullptr);

  // --- Live-set agreement ---------------------------------------------------------------------------

  // A barrier over the live (CONNECTED) members of `request.tasks` (empty = all), one per (name, set).
  // Completes once every live member of the set has called with that name; every caller then gets the same
  // LiveTasks (the live members that called, with their incarnations and payloads, and the live set's
  // generation). It never waits for a dead task: a failure while pending re-evaluates it. After a coordinator
  // restart it also waits until every task has rejoined or been failed (see rejoin_task). A restarted task
  // (new incarnation) that calls is a member like any other. DEADLINE_EXCEEDED after `timeout`, naming the
  // live tasks that did not call. The caller must be live and in the set (FailedPrecondition /
  // InvalidArgument otherwise); InvalidArgument for a payload over max_value_bytes.
  void get_live_tasks(TaskId task, Incarnation incarnation, LiveSetRequest request, absl::Duration timeout,
                      Callback<absl::StatusOr<LiveTasks>> done);

  // --- Operators / tests ----------------------------------------------------------------------------

  ServiceStatus status() const;

  // Expires deadlines and fails tasks whose heartbeat is older than heartbeat_timeout. Called by the
  // timer thread; tests with a ManualClock call it after advancing the clock.
  void check_timeouts();

  // Fails `task` with `error` as if it had been detected (tests, and the transport on identity checks).
  void fail_task(TaskId task, absl::Status error);

 private:
  struct Impl;
  explicit CoordinationService(ServiceOptions options);
  ServiceOptions options_;
  Incarnation service_incarnation_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mcx::distributed
