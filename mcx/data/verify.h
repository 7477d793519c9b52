// MCX_DATA_VERIFY=1: processes that hold the same rows of a global batch (replicas spanning processes) must
// have loaded identical data. Each such process publishes a SHA-256 of its rows (after transforms) in the
// coordination service's key-value store and compares it with the other holders' digests; a difference
// fails the batch naming the processes, instead of training silently on inconsistent replicas.
//
// Keys: mcx/data/verify/<loader>/<epoch>.<position>/<start>-<limit>/<process>; they stay in the store until
// the job ends (a debug check: about 100 bytes per batch and process).
// Blocking: kv_get of each other holder's digest, up to `deadline`. Single process (no agent): OK at once.
// Errors: DataLoss "[data] MCX_DATA_VERIFY: loader 'train' epoch 0 position 64 rows [0, 32): processes 0
// and 1 loaded different data (digest 1a2b.. vs 3c4d..)"; DeadlineExceeded naming the process whose digest
// did not come.
// Thread-safety: thread-safe (the agent is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/core/hash.h"
#include "mcx/data/shard_plan.h"

namespace mcx::data {

bool verify_enabled();  // MCX_DATA_VERIFY

absl::Status verify_replicas(const std::string& loader, int64_t epoch, int64_t position, const RowRange& rows,
                             const std::vector<int>& holders, const Sha256Digest& digest, absl::Time deadline);

}  // namespace mcx::data
