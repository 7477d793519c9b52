// PreemptionSync: agreeing on the step at which every live process of a job stops for a preemption (TSL's
// PreemptionSyncManager, over mcx's named live-set agreement so that dead processes are not waited for).
// The public API is mcx::multihost::reached_preemption_sync_point (mcx/multihost/preemption.h); this class is
// the per-agent machinery, usable with several agents in one process (tests).
//
// Protocol (key-value entries under "mcx/preemption/"):
//   1. A notice is published once per job: notify() inserts "notice" (the first publisher wins) and wakes
//      every task's watcher by writing the key "mcx/task/<task>/inbox/preemption_wake" (a task's inbox:
//      writable by every task under identity binding, principal.h).
//   2. Each process's watcher thread (started by the first reached_sync_point call) waits for its wake key in
//      slices of at most kWatchSlice and checks "notice" after each wake-up, so it learns of a notice within
//      one RPC of its publication.
//   3. Having learned it, the watcher joins the live-set agreement named kAgreementName with its payload: the
//      last step this process passed to reached_sync_point. Dead processes are not waited for; the agreement
//      completes once every live process has joined, and every member gets every member's step.
//      Its step is also written under "steps/<task>", so that a timeout names the processes that never joined.
//   4. The sync step is max(steps) + 1: larger than every member's step at the moment it joined, so every
//      member still reaches it (steps grow by one per call). The agreed value is also stored under
//      "sync_step", where a process that joins after the agreement (a restart) finds it.
// The watcher joins in the background, not in the caller's thread: processes run collectives between calls,
// so one blocked in its call while another is still stepping towards a collective with it would deadlock.
// While the agreement is in progress, reached_sync_point waits for it (a call must not pass a step the
// agreement could still choose); that wait ends with the agreement, bounded by its timeout.
//
// Errors are sticky: once the agreement failed (DeadlineExceeded naming the processes that did not report,
// this process no longer live, ...) every later reached_sync_point returns that error.
// Threads: one watcher thread, started by the first reached_sync_point and joined by stop() or the destructor.
// Thread-safety: all methods are thread-safe; reached_sync_point calls are serialised (one driving thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination/agent.h"

namespace mcx::distributed {

// The name of the live-set agreement (independent of every other agreement, see LiveSetRequest::name).
inline constexpr char kPreemptionAgreementName[] = "mcx/preemption";
// Key-value directory of the protocol.
inline constexpr char kPreemptionKeyDir[] = "mcx/preemption";

struct PreemptionSyncOptions {
  // Bounds the agreement: from the moment this process joins, every live process must have joined within it,
  // else DeadlineExceeded naming those that did not.
  absl::Duration timeout = absl::Seconds(60);
  // Longest single wait of the watcher (a wake-up normally ends it at once) and of one agreement call; also
  // bounds how long stop() can take when the coordination service does not answer.
  absl::Duration watch_slice = absl::Seconds(5);
  absl::Duration agreement_slice = absl::Seconds(1);
};

// What the agreement decided (for logs and tests).
struct PreemptionSyncPoint {
  int64_t step = 0;                // the sync step
  std::vector<TaskId> processes;   // the members of the agreement (empty when adopted from "sync_step")
  std::vector<int64_t> steps;      // parallel to processes: the step each one had passed when it joined
};

class PreemptionSync {
 public:
  // `agent` must be connected and outlive this object (or its stop()).
  PreemptionSync(CoordinationAgent* agent, PreemptionSyncOptions options = {});
  ~PreemptionSync();  // stop()
  PreemptionSync(const PreemptionSync&) = delete;
  PreemptionSync& operator=(const PreemptionSync&) = delete;

  // Publishes a preemption notice to the job (`reason` is kept in the "notice" entry and in logs; the first
  // notice of a job wins, later ones are no-ops). Blocks for a few RPCs, each with the agent's rpc_timeout.
  // Works before and after the first reached_sync_point. Errors: the agent's RPC errors.
  absl::Status notify(const std::string& reason);

  // Call every step with a step number that grows by one per call. Returns true exactly once: on the call
  // whose step is the agreed sync step; false on every other call. The first call starts the watcher.
  // Blocks only while the agreement is in progress (at most `timeout` + the transport's grace). Errors:
  // InvalidArgument when `step` does not grow; FailedPrecondition when a step jumped over the sync step, or
  // after stop(); the agreement's error (sticky): DeadlineExceeded naming the processes that did not report,
  // Aborted / FailedPrecondition when this process is no longer live, DataLoss for a malformed payload.
  absl::StatusOr<bool> reached_sync_point(int64_t step);

  TaskId task_id() const { return task_id_; }

  // Sets the agreement's timeout for an agreement that has not started yet.
  void set_timeout(absl::Duration timeout);

  // Whether this process has learned of a notice, and its reason.
  std::optional<std::string> notice() const;
  // The agreed sync point, once known.
  std::optional<PreemptionSyncPoint> sync_point() const;

  // Stops the watcher (waking it through its key) and joins it. Idempotent. An agreement in progress is
  // left after its current slice (at most agreement_slice).
  void stop();

 private:
  enum class Phase { kWatching, kAgreeing, kAgreed, kReached, kFailed, kStopped };
  void watch_loop();
  // Learns of a notice: OK with the reason, NotFound when there is none yet, else an RPC error.
  absl::StatusOr<std::string> read_notice();
  void agree(const std::string& reason);
  absl::StatusOr<PreemptionSyncPoint> run_agreement(int64_t my_step, absl::Duration timeout);
  // "processes {2, 3} did not": the live tasks without an entry under "steps/".
  std::string describe_missing();
  bool stopping() const;

  CoordinationAgent* const agent_;
  const TaskId task_id_;
  const PreemptionSyncOptions options_;
  const std::string wake_key_;

  mutable Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kWatching;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  std::optional<int64_t> last_step_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> notice_ ABSL_GUARDED_BY(mu_);
  std::optional<PreemptionSyncPoint> sync_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  absl::Time agreement_deadline_ ABSL_GUARDED_BY(mu_);
  std::thread watcher_ ABSL_GUARDED_BY(mu_);
  CondVar retry_cv_;  // wakes the watcher's back-off wait at stop()

  // notify() holds this across its RPCs, so stop() returns only once no notify() uses the agent any more.
  Mutex notify_mu_;
  bool notify_closed_ ABSL_GUARDED_BY(notify_mu_) = false;
};

// The process-wide instance over the agent of mcx::distributed::initialize. distributed.cc attaches the agent
// once initialize succeeded and detaches it (stopping the instance) first thing in shutdown; a program that
// exits without shutdown has it detached by an exit step (core/process_exit.h).
void attach_process_preemption_sync(CoordinationAgent* agent);
void detach_process_preemption_sync();
// The instance for the attached agent, created on first use with default options; nullptr when no agent is
// attached (no initialize). Holding the pointer past detach is safe: the stopped instance refuses every call.
std::shared_ptr<PreemptionSync> process_preemption_sync();

}  // namespace mcx::distributed
