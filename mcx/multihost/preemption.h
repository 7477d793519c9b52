// Preemption sync points (JAX's multihost_utils.reached_preemption_sync_point, over TSL's protocol): when a
// process of the job is told it will be preempted (SIGTERM, or notify_preemption), every live process stops at
// the same step, so the checkpoint they write together is consistent.
//
//   for (int64_t step = start; step < steps; ++step) {
//     if (mcx::multihost::reached_preemption_sync_point(step)) {
//       save_checkpoint(step);  // every live process, at the same step
//       return 0;
//     }
//     state = train_step(state, batch(step));
//   }
//
// Semantics (docs/fault_tolerance.md, "Preemption sync points"):
//   - Call it every step, from the thread that drives the job, with a step number that grows by one per call
//     (it may start anywhere). Returns true exactly once, on the call whose step is the sync step, and on
//     every live process with the same step; false on every other call.
//   - A notice reaches every live process within a few RPCs (a watcher thread per process). Each process then
//     joins, in the background, an agreement of the live processes with the last step it passed here; the sync
//     step is the largest of those steps + 1, so every process still reaches it. Processes that died are not
//     waited for (recoverable jobs); a process still running its step joins anyway, so collectives between
//     calls cannot deadlock against the agreement. A call waits only while the agreement is in progress.
//   - The agreement is bounded by `timeout` (default MCX_PREEMPTION_SYNC_TIMEOUT_S, 60 s): when a live process
//     has not joined by then (it never made its first call), DeadlineExceeded names it, on this and every later
//     call.
//   - Without mcx::distributed::initialize (one process) a notice makes the next call return true.
//
// SIGTERM: the first call (or enable_preemption_sync(), to be covered earlier, e.g. during start-up) installs
// a SIGTERM handler: the first SIGTERM becomes a notice instead of ending the process; a second SIGTERM ends
// it (the default action). A program that installed its own SIGTERM handler keeps it (the first call logs a
// warning; enable_preemption_sync() throws FailedPrecondition) and can report preemption with
// notify_preemption(). mcx-run forwards SIGTERM to every process and sends SIGKILL --grace-period seconds
// later (default 5): set the grace period to cover a step, the agreement and the checkpoint.
//
// MCX_ENABLE_PREEMPTION_SERVICE=0 turns the service off (JAX's jax_enable_preemption_service): initialize attaches
// none, no SIGTERM handler is installed, and every function here throws FailedPrecondition naming the variable.
//
// Errors (mcx::Error subclasses): InvalidArgument when a step does not grow; FailedPrecondition when a step
// skipped the sync step, or after mcx::distributed::shutdown; DeadlineExceeded as above; Aborted or
// FailedPrecondition when this process is no longer a live member of the job. Errors of the agreement are
// thrown again by every later call.
// Thread-safety: all functions may be called from any thread; reached_preemption_sync_point calls are
// serialised and belong to the thread that drives the job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace mcx::multihost {

// See above. Blocks only while the agreement runs (at most `timeout` plus the transport's grace).
bool reached_preemption_sync_point(int64_t step, std::optional<absl::Duration> timeout = std::nullopt);

// Installs the SIGTERM handler now (the first reached_preemption_sync_point call does it otherwise).
// Idempotent. Throws FailedPrecondition when the program has its own SIGTERM handler.
void enable_preemption_sync();

// Publishes a preemption notice to the job (as a SIGTERM would), e.g. from a scheduler's preemption API or in
// tests; `reason` appears in the logs. The first notice of a job wins; later ones are no-ops. Blocks for a few
// RPCs (each with the agent's RPC deadline). Throws the coordination service's errors (Unavailable, ...).
void notify_preemption(const std::string& reason = "notify_preemption()");

// The agreed sync step once this process knows it (e.g. to log "stopping at step N"); nullopt before. In a
// single-process program: the step of the call that returned true.
std::optional<int64_t> preemption_sync_step();

}  // namespace mcx::multihost
