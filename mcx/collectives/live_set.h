// The live set: which processes of the job this process agreed are alive (mcx::live_devices, in the
// multihost layer, records each agreement here), numbered by the agreement's generation. The data plane
// keys every group that spans processes by it (runtime/communicator_cache.h): a group built under an older
// live set is retired and rebuilt under the newer one, with a fresh rendezvous, so a process that restarted
// (new incarnation) and the survivors meet in new groups, and a group that includes a process outside the
// live set refuses to run instead of waiting for it (docs/architecture.md, "Data plane").
//
// Layering: the collectives layer holds the record so that the runtime and the data planes can read what the
// multihost layer agreed.
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mcx {

struct LiveSet {
  uint64_t generation = 0;             // job-wide, grows with every different live set (> 0)
  std::vector<int> requested;          // the processes asked about, ascending
  std::vector<int> processes;          // the live ones among them, ascending
  std::vector<uint64_t> incarnations;  // parallel to processes
  // A process asked about and found not live.
  bool excludes(int process) const;
  std::string to_string() const;  // "generation 3 (processes {0,2} of {0,1,2})"
};

// How many times the records changed (record_live_set with a newer generation): a cache that saw this number
// need not look the records up again until it changes (a cheap check on every collective).
uint64_t live_set_changes();

// Records an agreement over `live.requested`, replacing an older one over the same processes (an equal or
// older generation changes nothing: agreements of the same set repeat it).
void record_live_set(const LiveSet& live);

// The live set that governs a group of `processes` (ascending): the newest recorded agreement whose requested
// processes include all of them; nullopt when there is none (then the group is not governed: generation 0).
// Every member process of such a group took part in that agreement (or died), so they all find the same one.
std::optional<LiveSet> live_set_for(const std::vector<int>& processes);

// Processes reported failed. The distributed layer records every task the coordination service reports
// failed (with the incarnation that failed), and a process seen live again with another incarnation (a
// restart: in the job state or in an agreement) is cleared. make_peer_group (collectives/peer_group.h) refuses to
// build a group with a reported-failed process at once, instead of waiting for it in the rendezvous until the
// deadline. Thread-safe.
void record_process_failure(int process, uint64_t incarnation, const absl::Status& why);
void record_process_alive(int process, uint64_t incarnation);
// The reported failure of the first of `processes` that has one (its status, marked as that process's
// failure), or OK.
absl::Status reported_process_failure(const std::vector<int>& processes);

// Whether the live set governing `processes` (ascending) excludes one of them: then work over them can never
// run again (caches drop it).
bool excludes_any(const std::vector<int>& processes);

}  // namespace mcx
