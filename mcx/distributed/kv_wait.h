// A blocking key-value read that does not outlive its writer: waits for `key` like CoordinationAgent::kv_get,
// but in slices of 200 ms, and ends as soon as the coordination service has reported one of `writers` failed
// (core/live_set.h), since a dead writer never writes it. The rendezvous and save protocols wait this way so
// that no wait outlasts a process that can no longer answer.
//
// Returns the value; DeadlineExceeded at `until`; the writer's reported failure (marked as that process's
// failure: mark_process_failure); any other error of kv_get. Thread-safety: as the agent (thread-safe).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/coordination_agent.h"

namespace mcx::distributed {

absl::StatusOr<std::string> kv_get_while_writers_live(CoordinationAgent& agent, const std::string& key,
                                                       absl::Time until, const std::vector<int>& writers);

}  // namespace mcx::distributed
