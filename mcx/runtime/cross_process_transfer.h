// device_put between shardings whose devices live on different processes (runtime-level pipeline
// parallelism, as JAX documents for device_put across processes): every shard of the target is sent
// point-to-point from the process holding the source shard with the same index box.
//
// Contract:
//  - Applies to committed arrays (placed explicitly, or results of computations). An uncommitted array is a
//    process-local value: device_put of it fills each process's shards from its own copy, as in JAX.
//  - Called on every process that holds devices of either sharding, with the same arguments, in the same
//    order relative to the other transfers between the same devices (like a collective). Processes in
//    neither sharding may call it too; they move nothing.
//  - Shardings with the same number of devices and the same set of index boxes move whole shards, one channel
//    per device pair (below); any other pair of shardings of the same global shape is cut into pieces and
//    exchanged (cross_process_reshard.h).
//  - Returns at once: the source process's streams send (after the source shards are ready) and the target
//    process's streams receive, so transfers overlap computation (asynchronous dispatch). The result has the
//    target's addressable shards (none on a process that only sends).
//  - Each pair of devices has its own channel (a PeerGroup over their two processes, connected through the
//    data plane on first use) with a sequence number per transfer; the first exchange carries it with the
//    shape, so transfers issued in a different order on the two sides fail at once naming both, never mix data.
//  - Errors on the receiving side complete the target shards with the error (naming the peer process); a
//    failure on a sending process is logged there (it has no result to carry it) and the receiver fails at its
//    deadline or when the channel breaks.
// The device-to-device transfer guard counts every transfer. Thread-safety: thread-safe.
#pragma once

#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/sharding.h"

namespace mcx {

// Whether resharding value to target needs data from (or for) another process.
bool reshard_crosses_processes(const ArrayValue& value, const Sharding& target, std::span<const int64_t> dims);

absl::StatusOr<ArrayValue> reshard_across_processes(const ArrayValue& value, const Sharding& target,
                                                    std::span<const int64_t> dims, bool is_explicit, bool committed,
                                                    std::string_view api);

}  // namespace mcx
