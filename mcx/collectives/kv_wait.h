// A blocking key-value read that does not outlive its writer: waits for `key` in the job's key-value store
// (core/job_key_value.h) like JobKeyValue::get, but in slices of 200 ms, and ends as soon as the coordination
// service has reported one of `writers` failed (live_set.h), since a dead writer never writes it. The
// rendezvous and save protocols wait this way so that no wait outlasts a process that can no longer answer.
//
// Returns the value; DeadlineExceeded at `until`; the writer's reported failure (marked as that process's
// failure: mark_process_failure); any other error of the store's get. Thread-safety: as the store (thread-safe).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/job_key_value.h"

namespace mcx {

absl::StatusOr<std::string> kv_get_while_writers_live(JobKeyValue& kv, const std::string& key, absl::Time until,
                                                       const std::vector<int>& writers);

}  // namespace mcx
