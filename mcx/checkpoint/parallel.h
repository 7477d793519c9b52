// The worker threads of one save or restore: hashing and file I/O spread over a few short-lived threads that
// belong to the call (not the shared compute pool, which the training step needs), and the priority of a
// background writer.
//
// Thread-safety: parallel_for_status may be called from any thread; fn must be safe to call concurrently for
// distinct indices. Blocking: parallel_for_status returns when every started fn has returned (fn's own calls
// carry their deadlines; the helpers add no waits of their own).
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace mcx::checkpoint {

// Threads for one call: `requested` if > 0, else the hardware concurrency, at most 8 (file I/O and hashing
// stop scaling beyond that on one host), at least 1.
int io_threads(int requested);

// Runs fn(i) for every i in [0, n) on up to `threads` threads (the calling thread is one of them; threads > 1
// are started with std::thread and so inherit the caller's scheduling policy and nice value). After the first
// failure no new index starts; returns the failure with the lowest index among those that ran, else OK.
absl::Status parallel_for_status(int64_t n, int threads, const std::function<absl::Status(int64_t)>& fn);

// Moves the calling thread to SCHED_IDLE (Linux: it runs only on CPU time no normal thread wants; threads it
// starts afterwards inherit the policy). OK without effect elsewhere; Internal naming errno if refused.
absl::Status make_this_thread_idle_priority();

}  // namespace mcx::checkpoint
