// The default heartbeat interval and timeout of a job, by its size.
//
// Each heartbeat costs the coordinator a message in and a reply out (most of it the kernel's TCP work), so with a
// fixed interval its load grows with the job: at 16,384 processes heartbeating every second it was about 20% of
// a core (docs/distributed.md, "Scale"). The defaults keep the coordinator at about kHeartbeatsPerSecond
// heartbeats a second however large the job: 1 s up to 4,096 processes, then N / 4,096 s (4 s at 16,384), with a
// timeout of 10 s or 10 intervals, whichever is longer. A dead process is still seen at once through its broken
// watch stream; the heartbeat only catches one that is alive but stuck, for which a few seconds more matter little.
//
// Explicit settings (MCX_HEARTBEAT_INTERVAL / MCX_HEARTBEAT_TIMEOUT, the options of initialize(), mcx-run's and
// mcx-coordinator's flags) replace these.
#pragma once

#include <algorithm>

#include "absl/time/time.h"

namespace mcx::distributed {

inline constexpr int kHeartbeatsPerSecond = 4096;

inline absl::Duration default_heartbeat_interval(int num_processes) {
  return std::max(absl::Seconds(1), absl::Seconds(1) * num_processes / kHeartbeatsPerSecond);
}

inline absl::Duration default_heartbeat_timeout(int num_processes) {
  return std::max(absl::Seconds(10), 10 * default_heartbeat_interval(num_processes));
}

// The interval when only the timeout was set: the default for the job's size, but at most a third of the timeout
// (so at least two heartbeats may be lost or late before the task is failed).
inline absl::Duration default_heartbeat_interval(int num_processes, absl::Duration timeout) {
  return std::min(default_heartbeat_interval(num_processes), timeout / 3);
}

}  // namespace mcx::distributed
