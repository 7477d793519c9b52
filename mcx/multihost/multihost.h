// mcx::multihost: utilities for programs that run one controller per process (JAX's
// jax.experimental.multihost_utils), over the data plane, each with a deadline.
//
//   mcx::multihost::sync_global_devices("after_init");           // all processes reach here; names who did not
//   auto cfg = mcx::multihost::broadcast_one_to_all(cfg);         // process 0's values everywhere
//   auto all = mcx::multihost::process_allgather(local_metrics);  // [num_processes, ...] per leaf
//   mcx::multihost::assert_equal(params, "replicas drifted");     // names the processes and the first leaf
//
// Every process must call the same utilities in the same order (like collectives). Each call carries its name
// and a per-process sequence number to the other processes with its first exchange (collectives/launch_check.h), so
// processes that call different utilities (or the same one with different names) fail at once with an error
// naming both calls, instead of hanging. Timeouts: each call takes one (default MCX_DEVICE_TIMEOUT_S);
// DeadlineExceeded names the processes that did not arrive where the control plane can tell, else the peer
// whose data did not come. In a single-process program every utility works and needs no initialize().
//
// Errors (thrown as mcx::Error subclasses): InvalidArgument for trees whose structure, dtypes or shapes differ
// between processes (naming the leaf and the processes), FailedPrecondition for a call mismatch,
// DeadlineExceeded, Unavailable for a process that died. assert_equal throws mcx::InvalidArgument when values
// differ.
// Thread-safety: calls are serialised within a process (one at a time); call them from the thread that
// drives the job.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "mcx/runtime/mesh.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace mcx::multihost {

// Blocks until every local device has finished the work issued before the call and every process has called
// sync_global_devices(name). The error on timeout names the processes that had not arrived; different names
// on different processes are an error naming both.
void sync_global_devices(const std::string& name, std::optional<absl::Duration> timeout = std::nullopt);

namespace detail {
std::vector<Array> broadcast_one_to_all(const std::vector<Array>& leaves, const TreeDef& def, bool is_source,
                                        absl::Duration timeout);
std::vector<Array> process_allgather(const std::vector<Array>& leaves, const TreeDef& def, bool tiled,
                                     absl::Duration timeout);
void assert_equal(const std::vector<Array>& leaves, const TreeDef& def, const std::string& message,
                  absl::Duration timeout);
absl::Duration default_timeout();
}  // namespace detail

// The source process's tree on every process (default source: process 0). Exactly one process must be the
// source; the others pass a tree of the same structure, dtypes and shapes (its values are ignored). Leaves of
// the result are arrays on this process's default device.
template <PyTree T>
T broadcast_one_to_all(const T& tree, std::optional<bool> is_source = std::nullopt,
                       std::optional<absl::Duration> timeout = std::nullopt);

// Every process's leaves gathered on every process. tiled=false: a new leading axis of size process_count()
// (also for a single process, so the shape never depends on the job size); tiled=true: concatenated along
// axis 0. A leaf that is a global array (sharded over a mesh with devices of every process) yields its global
// value, assembled from every process's shards, as in JAX; unlike JAX this holds in a one-process job too, so
// results never change shape with the job size. Leaves must agree in dtype and shape (tiled: all but axis 0).
template <PyTree T>
T process_allgather(const T& tree, bool tiled = false, std::optional<absl::Duration> timeout = std::nullopt);

// Checks that every process holds bitwise identical leaves (by SHA-256). On a difference throws
// InvalidArgument: "<message>: leaf 2 ['w'] differs: processes 1, 3 hold other values than process 0".
template <PyTree T>
void assert_equal(const T& tree, const std::string& message = "",
                  std::optional<absl::Duration> timeout = std::nullopt);

// JAX's host_local_array_to_global_array for one array: `local` is this process's part of a global array laid
// out by P over mesh; the global shape multiplies each dimension split over mesh axes spanning processes by
// the number of processes along them. No communication.
Array host_local_array_to_global_array(const Array& local, const Mesh& mesh, const PartitionSpec& spec);
// The inverse: this process's part of `global` (sharded by spec over mesh) as an array on its default device.
Array global_array_to_host_local_array(const Array& global, const Mesh& mesh, const PartitionSpec& spec);
// Inside jit, vmap or grad (a tracer), both are with_sharding_constraint(x, NamedSharding(mesh, spec)): a traced
// value is already global. InvalidArgument there when the spec splits a dimension across processes (the local
// and global shapes differ; convert outside the transformation), naming the dimension.
// Both over a pytree, as JAX's: one spec for every leaf, or one per leaf in tree_flatten order (JAX's pytree of
// specs, flattened). InvalidArgument when the number of specs differs from the number of leaves.
template <PyTree T>
T host_local_array_to_global_array(const T& tree, const Mesh& mesh, const PartitionSpec& spec);
template <PyTree T>
T host_local_array_to_global_array(const T& tree, const Mesh& mesh, const std::vector<PartitionSpec>& specs);
template <PyTree T>
T global_array_to_host_local_array(const T& tree, const Mesh& mesh, const PartitionSpec& spec);
template <PyTree T>
T global_array_to_host_local_array(const T& tree, const Mesh& mesh, const std::vector<PartitionSpec>& specs);

// ---- templates -------------------------------------------------------------------------------------------

template <PyTree T>
T broadcast_one_to_all(const T& tree, std::optional<bool> is_source, std::optional<absl::Duration> timeout) {
  auto [leaves, def] = tree_flatten(tree);
  const bool source = is_source.value_or(process_index() == 0);
  return tree_unflatten<T>(
      def, detail::broadcast_one_to_all(leaves, def, source, timeout.value_or(detail::default_timeout())));
}

template <PyTree T>
T process_allgather(const T& tree, bool tiled, std::optional<absl::Duration> timeout) {
  auto [leaves, def] = tree_flatten(tree);
  return tree_unflatten<T>(def,
                           detail::process_allgather(leaves, def, tiled, timeout.value_or(detail::default_timeout())));
}

template <PyTree T>
void assert_equal(const T& tree, const std::string& message, std::optional<absl::Duration> timeout) {
  auto [leaves, def] = tree_flatten(tree);
  detail::assert_equal(leaves, def, message, timeout.value_or(detail::default_timeout()));
}

namespace detail {
using LeafConversion = Array (*)(const Array&, const Mesh&, const PartitionSpec&);
// Applies convert(leaf, specs[i]) to every leaf (specs of size 1: the same spec for all); `api` names the call
// in the error when the sizes differ.
std::vector<Array> convert_leaves(const std::vector<Array>& leaves, const std::vector<PartitionSpec>& specs,
                                  const char* api, LeafConversion convert, const Mesh& mesh);

template <PyTree T>
T convert_tree(const T& tree, const Mesh& mesh, const std::vector<PartitionSpec>& specs, const char* api,
               LeafConversion convert) {
  auto [leaves, def] = tree_flatten(tree);
  return tree_unflatten<T>(def, convert_leaves(leaves, specs, api, convert, mesh));
}
}  // namespace detail

template <PyTree T>
T host_local_array_to_global_array(const T& tree, const Mesh& mesh, const std::vector<PartitionSpec>& specs) {
  return detail::convert_tree(tree, mesh, specs, "host_local_array_to_global_array",
                              static_cast<detail::LeafConversion>(&host_local_array_to_global_array));
}

template <PyTree T>
T host_local_array_to_global_array(const T& tree, const Mesh& mesh, const PartitionSpec& spec) {
  return host_local_array_to_global_array(tree, mesh, std::vector<PartitionSpec>{spec});
}

template <PyTree T>
T global_array_to_host_local_array(const T& tree, const Mesh& mesh, const std::vector<PartitionSpec>& specs) {
  return detail::convert_tree(tree, mesh, specs, "global_array_to_host_local_array",
                              static_cast<detail::LeafConversion>(&global_array_to_host_local_array));
}

template <PyTree T>
T global_array_to_host_local_array(const T& tree, const Mesh& mesh, const PartitionSpec& spec) {
  return global_array_to_host_local_array(tree, mesh, std::vector<PartitionSpec>{spec});
}

}  // namespace mcx::multihost
