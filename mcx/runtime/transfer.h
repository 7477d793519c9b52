// Placing and moving array data: the ArrayValue-level operations behind mcx::device_put,
// mcx::device_get and the make_array_from_* constructors (trace/placement.h is the user API).
//
// All functions return at once with arrays whose shards are being filled on the target devices' streams
// (asynchronous copies), except where they must read host data the caller owns (callbacks run on the
// calling thread). Transfer-guard checks happen here; `is_explicit` says whether the user asked for the
// transfer. Errors are returned as Status with "[api] " prefixes, except a transfer the guard disallows:
// check_transfer throws TransferGuardError (transfer_guard.h) through these functions, so that the user
// API sees that exception type. Guard checks run before any work is enqueued. Host-to-device: put_host and
// the from_* constructors (explicit); device-to-device: reshard when some data moves to another device;
// device-to-host: fetch_to_host. from_single_device_arrays moves no data and checks nothing.
//
// Resharding is a copy of index boxes: each target shard is assembled from the source shards that
// overlap it (within one process, no communication library is involved). When a target shard's data lives
// on another process (device_put between the devices of different processes), reshard sends whole shards
// point-to-point over the data plane instead (cross_process_transfer.h: same shard shapes on both sides).
#pragma once

#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/runtime/array_value.h"
#include "mcx/runtime/sharding.h"

namespace mcx {

// Host data -> an array with `sharding` (each addressable shard copied from its box). Committed.
absl::StatusOr<ArrayValue> put_host(const Buffer& host, const Sharding& sharding, bool is_explicit,
                                    std::string_view api);
// Any array -> the same value with `sharding` (a no-op, sharing shards, when equivalent). committed
// says whether the result is committed (device_put: true; an implicit move of an uncommitted array
// keeps it uncommitted).
absl::StatusOr<ArrayValue> reshard(const ArrayValue& value, const Sharding& sharding, bool is_explicit,
                                   bool committed, std::string_view api);
// The whole value on the host (awaits the shards; FailedPrecondition naming the missing boxes when the
// process does not hold every element). Checks the device-to-host guard.
absl::StatusOr<Buffer> fetch_to_host(const ArrayValue& value, bool is_explicit, std::string_view api);

// jax.make_array_from_callback: data_callback(box) returns the host data of that box (its dims must equal
// box.shape(), dtype must equal dtype). Called once per addressable shard, on the calling thread.
absl::StatusOr<ArrayValue> from_callback(const AbstractValue& aval, const Sharding& sharding,
                                         const std::function<Buffer(const IndexBox&)>& data_callback);
// jax.make_array_from_single_device_arrays: one single-device array per addressable device of sharding,
// in the sharding's device order, each with the shard shape (errors name the offending array).
absl::StatusOr<ArrayValue> from_single_device_arrays(const AbstractValue& aval, const Sharding& sharding,
                                                     std::span<const ArrayValue> arrays);
// Per dimension of a rank-`rank` array laid out by `sharding`: the shards of the dimension (in shard units) this
// process's devices hold, [lo, hi) of `shards`, and whether they are contiguous. [0, shards) means the dimension
// is not split across processes (also for a process holding no device of the sharding). InvalidArgument "[api]
// ..." when the spec does not fit the rank or mesh.
struct ProcessShardRange {
  int64_t lo = 0, hi = 0, shards = 1;
  bool contiguous = true;
};
absl::StatusOr<std::vector<ProcessShardRange>> process_shard_ranges(const Sharding& sharding, int rank,
                                                                   std::string_view api);

// jax.make_array_from_process_local_data: local_data is this process's part of the global array. Per
// dimension (JAX's rules): if the dimension is not sharded across processes the local data must be the
// whole dimension; if it is, the local data holds this process's contiguous slice. global_dims empty:
// inferred (local dims times the number of processes along each process-sharded dimension).
absl::StatusOr<ArrayValue> from_process_local_data(const Sharding& sharding, const Buffer& local_data,
                                                   std::span<const int64_t> global_dims);

}  // namespace mcx
