// The general device_put across processes: between any two shardings of the same global shape (other shard
// shapes, device counts, meshes or device sets), as JAX's multi-controller device_put reshards. The
// whole-shard transfer of cross_process_transfer.h covers shardings with the same boxes; this covers the rest.
//
// Plan (the same on every process, from the two shardings alone): every target shard is cut into the
// pieces where it meets each distinct source box; a piece comes from a holder of its source box on the
// target device's process when there is one (a local copy), else from the first device holding it. The
// bytes one process sends another are the pieces between them packed in plan order: one message per
// ordered pair of processes, all posted in one exchange of a group over every process of either sharding
// (so the exchange is an all-to-all-v and nothing waits on the order of messages). Pieces that stay on a
// process are copied between its buffers directly.
//
// Contract: as reshard_across_processes (cross_process_transfer.h): called on every process that holds
// devices of either sharding, with the same arguments, in the same order; returns at once; the transfer runs
// on the stream of this process's lowest device among both shardings (transfers between the same processes
// run in the order issued, whatever streams they use); the first exchange carries a launch check (the
// shardings, dtype and sequence number), so processes issuing different transfers fail naming both. Errors
// complete this process's target shards (the peer's failure names it); a process that only sends logs them.
// The device-to-device transfer guard counts the transfer. Thread-safety: thread-safe.
#pragma once

#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/sharding.h"

namespace mcx {

absl::StatusOr<ArrayValue> reshard_pieces_across_processes(const ArrayValue& value, const Sharding& target,
                                                           std::span<const int64_t> dims, bool is_explicit,
                                                           bool committed, std::string_view api);

}  // namespace mcx
