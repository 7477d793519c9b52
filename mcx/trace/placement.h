// Placing arrays on devices (jax.device_put, jax.device_get, jax.make_array_from_*,
// jax.lax.with_sharding_constraint).
//
//   mcx::Mesh mesh = mcx::make_mesh({4}, {"data"});
//   mcx::Array x = mcx::device_put(batch, mcx::NamedSharding(mesh, mcx::P("data", mcx::None)));
//   for (const mcx::ArrayShard& s : x.addressable_shards()) { ... s.device, s.index, s.data ... }
//   mcx::Buffer whole = mcx::device_get(x);
//
// All placement is asynchronous: the functions return at once; reading data waits for it. Placement is
// an explicit transfer for the transfer guard (transfer_guard.h). Errors are thrown as mcx::Error with
// "[api] " prefixes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/mesh.h"
#include "mcx/runtime/sharding.h"
#include "mcx/runtime/sharding_view.h"
#include "mcx/runtime/transfer_guard.h"
#include "mcx/runtime/thread_guard.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/array.h"

namespace mcx {

// Host data or an array (any sharding) -> an array with `sharding` (resharding between any two
// shardings); committed. Inside jit/grad, device_put of a tracer is with_sharding_constraint.
Array device_put(const Array& x, const Sharding& sharding);
Array device_put(const Array& x, const Device& device);
Array device_put(const Buffer& host, const Sharding& sharding);
Array device_put(const Buffer& host, const Device& device);

// The whole value as host data (explicit device-to-host transfer). FailedPrecondition naming the missing
// index boxes when this process does not hold every element (a multi-process array).
Buffer device_get(const Array& x);

// jax.make_array_from_callback: callback(box) returns the data of that box of the global array.
Array make_array_from_callback(const std::vector<int64_t>& dims, DType dtype, const Sharding& sharding,
                               const std::function<Buffer(const IndexBox&)>& callback);
// jax.make_array_from_single_device_arrays: arrays[k] is the shard of the k-th addressable device of
// sharding (sharding order), each on that device with the shard shape. dtype: the arrays' (checked), and
// required when this process holds no device of the sharding: its list is empty and the result holds only the
// metadata (shape, dtype, sharding) of an array whose data live in other processes (docs/sharding.md, "Meshes
// over a subset of the processes").
Array make_array_from_single_device_arrays(const std::vector<int64_t>& dims, const Sharding& sharding,
                                           const std::vector<Array>& arrays, std::optional<DType> dtype = std::nullopt);
// jax.make_array_from_process_local_data: this process's part of a global array (see
// runtime/transfer.h for the per-dimension rules). global_dims empty: inferred.
Array make_array_from_process_local_data(const Sharding& sharding, const Buffer& local_data,
                                         const std::vector<int64_t>& global_dims = {});

// Inside jit: pins x's sharding (the partitioner reshards to it; Unconstrained dims are left to
// propagation). Outside traces: device_put(x, sharding). The sharding must be a NamedSharding.
Array with_sharding_constraint(const Array& x, const Sharding& sharding);

// A concrete array's sharding drawn as a text grid (jax.debug.visualize_array_sharding; runtime/sharding_view.h
// says how): which device holds which box. InvalidArgument for a rank above 2 or a tracer.
std::string visualize_array_sharding(const Array& x);

}  // namespace mcx
