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

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mcx/core/mutex.h"
#include "mcx/core/metrics.h"
#include "mcx/distributed/coordination/job_state_snapshot.h"
#include "mcx/distributed/coordination/service_lock.h"
#include "mcx/distributed/coordination/service_metrics.h"
#include "mcx/distributed/coordination/types.h"
#include "mcx/distributed/security/caller.h"

namespace mcx::distributed {


// What one task owns in the service's key-value store (the per-task quotas of ServiceOptions).
struct KvUsage {
  int64_t keys = 0;
  int64_t bytes = 0;
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
  // change (never concurrently for one subscription; the newest state only: changes made while a delivery to
  // this watcher is pending, or inside a DeliveryBatch, reach it as one). The snapshot is shared by every
  // watcher; its changed_since() tells a transport which tasks to send a watcher that has an older version
  // (job_state_snapshot.h). With task >= 0 the
  // subscription monitors that task's connection: when the transport reports the watch ended
  // (end_watch(id, connection_lost = true)) while the task is CONNECTED, the task fails with UNAVAILABLE
  // "connection to task N lost (process died or network failed)". task = -1 is an observer (mcx-ctl).
  // Errors: InvalidArgument (unknown task), FailedPrecondition (stale incarnation).
  absl::StatusOr<uint64_t> watch(TaskId task, Incarnation incarnation,
                                 Callback<const std::shared_ptr<const JobStateSnapshot>&> on_state);
  // Ends a subscription; after it returns, its on_state is not running and will not run again.
  void end_watch(uint64_t watch_id, bool connection_lost);

  // While an object of this class lives, the job-state changes this thread makes on `service` are not delivered
  // to the watchers one by one: its destructor delivers the newest state once. A transport that handles many
  // events in one go (the fast path's reactor: the connections of 164 killed tasks closing at once) wraps them
  // in one, so each watcher gets one update instead of one per event. Nests; changes of other threads are
  // delivered as usual. Thread-safety: used by the thread that made it.
  class DeliveryBatch {
   public:
    explicit DeliveryBatch(CoordinationService* service);
    ~DeliveryBatch();
    DeliveryBatch(const DeliveryBatch&) = delete;
    DeliveryBatch& operator=(const DeliveryBatch&) = delete;

   private:
    friend class CoordinationService;
    CoordinationService* service_;
    DeliveryBatch* outer_;  // the batch this thread had open before (nesting)
    bool changed_ = false;  // a change waits for the destructor
  };

  // The current job state (non-blocking).
  JobState job_state() const;

  // --- Key-value store ------------------------------------------------------------------------------
  // Keys are non-empty byte strings without NUL; "a/b" is in the directory "a". Values are bytes.

  // `caller` (the write calls, cancel_barrier, end_job; security/caller.h): the identity the gRPC edge bound to
  // the call, checked by authorize_key (principal.h) with the key's owner, which the store records (the task that
  // first wrote it); or Caller::trusted() (in-process, or identity binding off), not checked and owning nothing.

  // Errors: AlreadyExists (key present and !allow_overwrite), InvalidArgument (empty/oversized key or
  // oversized value; the message gives both sizes and the limit), ResourceExhausted (store full),
  // PermissionDenied (caller).
  absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                         const Caller& caller);
  // Runs `done` with the value once the key exists, or DEADLINE_EXCEEDED after `timeout`.
  void kv_get(std::string_view key, absl::Duration timeout, Callback<absl::StatusOr<std::string>> done);
  // NotFound when absent.
  absl::StatusOr<std::string> kv_try_get(std::string_view key);
  // Atomically adds `delta` to the decimal int64 stored at key (absent = 0) and returns the new value.
  // Errors: InvalidArgument when the stored value is not a decimal int64 or the sum overflows.
  absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta, const Caller& caller);
  // Every entry whose key starts with `dir` + "/" (a trailing "/" on dir is allowed), in key order;
  // an empty `dir` lists every entry.
  std::vector<KeyValue> kv_dir(std::string_view dir);
  // Deletes `key` and every key under `key/`. Deleting nothing is OK. Returns the number deleted.
  // PermissionDenied (caller; naming the first key it may not delete) deletes nothing.
  absl::StatusOr<size_t> kv_delete(std::string_view key, const Caller& caller);

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
  absl::Status cancel_barrier(std::string_view name, int64_t counter, const Caller& caller);
  // Ends the job (an admin's call under identity binding; PERMISSION_DENIED for any other role): the job error
  // becomes ABORTED "the job was ended by admin/root: <reason>", in either failure mode, so every task's watch
  // delivers it (fate-sharing tasks stop; recoverable ones hear it through on_failure), pending barriers and
  // registrations fail with it, and no task may register again. FAILED_PRECONDITION if the job failed already.
  absl::Status end_job(std::string_view reason, const Caller& caller);

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
                      Callback<const absl::StatusOr<LiveTasks>&> done);

  // --- Operators / tests ----------------------------------------------------------------------------

  ServiceStatus status() const;
  // The service's metrics (service_metrics.h) and the registry they live in: mcx-coordinator serves
  // metrics_registry().text(); a transport may add its own families to it.
  metrics::Registry& metrics_registry() { return registry_; }

  // Expires deadlines and fails tasks whose heartbeat is older than heartbeat_timeout. Called by the
  // timer thread; tests with a ManualClock call it after advancing the clock.
  void check_timeouts();

  // Fails `task` with `error` as if it had been detected (tests, and the transport on identity checks).
  void fail_task(TaskId task, absl::Status error);

 private:
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
  // A resolved participant set, sorted and shared: "every task" (what a request naming none means, the usual
  // case) is one vector, so comparing two arrivals' sets is a pointer comparison, not a walk over N tasks.
  using TaskSet = std::shared_ptr<const std::vector<TaskId>>;
  static bool same_tasks(const TaskSet& a, const TaskSet& b) { return a == b || *a == *b; }
  struct Barrier {
    std::string name;
    int64_t counter = 0;
    TaskSet participants;
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
    Callback<const absl::StatusOr<LiveTasks>&> done;  // by reference: N callers share one answer of N tasks
  };
  // A live-set agreement is identified by its name and its (sorted) task set.
  using LiveSetKey = std::pair<std::string, TaskSet>;
  struct LiveSetKeyLess {
    bool operator()(const LiveSetKey& a, const LiveSetKey& b) const {
      if (a.first != b.first) return a.first < b.first;
      return a.second != b.second && *a.second < *b.second;
    }
  };
  struct LiveSet {
    std::map<TaskId, LiveWaiter> waiting;
    absl::Time first_call;  // when the first of the waiting callers called (the agreement's latency starts)
    // The live (CONNECTED) members of the set when it was last scanned; valid until a task's state changes
    // (evaluate_live_sets_locked with membership_changed). While valid, every waiter is one of them, so a new
    // caller completes the agreement exactly when the waiters number live_members: an arrival costs O(log N),
    // not a scan of the set (16,384 callers: 13 s of scans, docs/distributed.md "Scale").
    size_t live_members = 0;
    bool live_members_valid = false;
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
    Callback<const std::shared_ptr<const JobStateSnapshot>&> on_state;
    // A delivery is queued (on some ServiceLock) and has not read the version yet: a change meanwhile needs
    // no delivery of its own.
    bool scheduled = false;  // guarded by the service's mu_
    Mutex mu;  // serialises deliveries
    uint64_t delivered ABSL_GUARDED_BY(mu) = 0;
    bool ended ABSL_GUARDED_BY(mu) = false;
    bool first ABSL_GUARDED_BY(mu) = true;
  };

  explicit CoordinationService(ServiceOptions options);

  // --- checks and views (service.cc) ---
  absl::Status check_task_id(absl::string_view api, TaskId task) const;
  // The caller must be a CONNECTED task with this incarnation.
  absl::Status check_caller_locked(absl::string_view api, TaskId task, Incarnation inc) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status check_participants(absl::string_view api, const std::vector<TaskId>& ids) const;
  // The sorted, deduplicated set; empty: every task (one shared vector, made once).
  TaskSet resolve_set(std::vector<TaskId> ids) const;
  JobState job_state_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The current job state, built once per version and shared by every watcher's delivery (N watchers of an
  // N-task job would otherwise build N states of N tasks per change), with the history of changes before it.
  std::shared_ptr<const JobStateSnapshot> job_state_snapshot_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "task 1 (connected, last heartbeat 0.3s ago)"
  std::string describe_task_locked(TaskId id, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job state changed: a new version, delivered to every watcher after the lock is released (or when this
  // thread's DeliveryBatch ends).
  void changed_locked(ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a delivery of the newest state to every watcher that has none queued.
  void schedule_deliveries_locked(ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delivers the newest job state to one watcher (takes the lock itself).
  void deliver(const std::shared_ptr<Watcher>& w) ABSL_LOCKS_EXCLUDED(mu_);

  // --- the timer (service.cc) ---
  void timer_loop() ABSL_LOCKS_EXCLUDED(mu_);
  void check_timeouts_locked(ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time earliest_deadline_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A wait with this deadline was added: wakes the timer thread only if its current wait ends later (a barrier
  // of 64 tasks used to wake it 64 times, each scanning every deadline).
  void wake_timer_for_locked(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- tasks (service_tasks.cc) ---
  // Marks a task failed; the failure becomes the job's in fate-sharing mode.
  void fail_task_locked(TaskId id, absl::Status error, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job as a whole failed (a fate-shared task failure, or an admin ended it): the first such error becomes the
  // job error every watcher sees; pending barriers and registrations fail with it. The caller then re-evaluates
  // live sets and publishes the change.
  void fail_job_locked(absl::Status why, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool all_registered_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // O(1): registered_tasks_ counts them
  void mark_registered_locked(Task& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the waiting registrations once every task has registered at least once.
  void complete_registration_locked(ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<TaskId> unregistered_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The tasks a rebuilt service still expects back after the coordinator restarted (see rejoin_task).
  std::vector<TaskId> awaited_after_restart_locked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void expire_tasks_locked(absl::Time now, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- barriers (service_barriers.cc) ---
  void barrier_arrive_locked(TaskId task, Incarnation inc, std::string_view name_in, int64_t counter,
                             std::vector<TaskId> req_tasks, absl::Duration timeout, Callback<absl::Status> done,
                             ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void finish_barrier_locked(Barrier& b, absl::Status result, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why barrier `name` cannot pass: participant `task` was declared dead (ABORTED, naming it and its error).
  absl::Status participant_failed_locked(std::string_view name, TaskId task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Instance `counter` of barrier `name` passed on the service this one replaced (rejoin_task): complete it.
  void barrier_passed_locked(const std::string& name, int64_t counter, ServiceLock& lock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void expire_barriers_locked(absl::Time now, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- live sets (service_live_sets.cc) ---
  // Answers the agreements that can complete (and the callers that are no longer live). membership_changed: a
  // task's state or incarnation may have changed since the last call (false only for a new caller).
  void evaluate_live_sets_locked(ServiceLock& lock, bool membership_changed = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void expire_live_sets_locked(absl::Time now, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LiveTasks::change of agreement `now` over the key whose previous agreement was `before`.
  static std::shared_ptr<const LiveTasks::Change> live_set_change(const AgreedLiveSet& before, const LiveTasks& now);

  // --- key-value store (service_kv.cc) ---
  void expire_kv_gets_locked(absl::Time now, ServiceLock& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceOptions options_;
  const Incarnation service_incarnation_;
  const Clock* const clock_;
  metrics::Registry registry_;
  ServiceMetrics metrics_{registry_};

  mutable Mutex mu_;
  CondVar timer_cv_;
  // When the timer thread's current wait ends; InfinitePast while it is not waiting (it recomputes the
  // earliest deadline before it waits again). See wake_timer_for_locked.
  absl::Time timer_wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
  TaskSet all_tasks_;  // 0..num_tasks-1; immutable after construction
  int64_t registered_tasks_ ABSL_GUARDED_BY(mu_) = 0;  // tasks with ever_registered
  std::shared_ptr<const JobStateSnapshot> snapshot_ ABSL_GUARDED_BY(mu_);  // job_state_snapshot_locked's, newest
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status job_error_ ABSL_GUARDED_BY(mu_);
  // Every task has registered at least once (here, or with the coordinator this service replaced: rebuilt).
  bool assembled_ ABSL_GUARDED_BY(mu_) = false;
  // A task rejoined (rejoin_task): this service replaced a lost coordinator; tasks still DISCONNECTED are
  // expected back until rebuilt_at_ + heartbeat_timeout.
  bool rebuilt_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time rebuilt_at_ ABSL_GUARDED_BY(mu_);
  std::vector<RegisterWaiter> register_waiters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Barrier> barriers_ ABSL_GUARDED_BY(mu_);                // newest instance per name
  std::map<LiveSetKey, LiveSet, LiveSetKeyLess> live_sets_ ABSL_GUARDED_BY(mu_);                // pending agreements
  std::map<LiveSetKey, AgreedLiveSet, LiveSetKeyLess> agreed_live_sets_ ABSL_GUARDED_BY(mu_);  // the last one per key
  uint64_t live_set_generation_ ABSL_GUARDED_BY(mu_) = 0;                      // job-wide, see LiveTasks
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TaskId> kv_owner_ ABSL_GUARDED_BY(mu_);  // keys first written by a task Principal
  std::map<TaskId, KvUsage> kv_usage_ ABSL_GUARDED_BY(mu_);      // what each owner holds (the per-task quotas)
  size_t kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::vector<KvWaiter>> kv_waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  std::thread timer_;
};

}  // namespace mcx::distributed
