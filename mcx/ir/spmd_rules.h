// Shape/dtype rules and attribute helpers of the SPMD ops (op.h, opset 2): all_reduce, all_gather,
// reduce_scatter, all_to_all, collective_permute, axis_index, sharding_constraint.
//
// The helpers decode and validate the attributes once, so that the backend's kernels, the reference
// evaluators and the VJP rules read them the same way. Every error is InvalidArgument starting with
// "[op_name] ".
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/reduce_op.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"

namespace mcx::ir {

// The shape rule of one SPMD op (called by infer_type; attribute names are checked there).
absl::StatusOr<AbstractValue> spmd_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                              const Attrs& attrs, const SymbolicScope& scope);

// The most partitions (and mesh devices) an SPMD op may name: keeps every size computed from the
// attributes (dims * group_size, mesh products) far from int64 overflow on untrusted artifacts.
inline constexpr int64_t kMaxPartitions = int64_t{1} << 20;

// replica_groups + group_size, validated: group_size >= 1, the list is a non-empty multiple of
// group_size, and it holds every partition id 0..N-1 exactly once (N = its length, at most
// kMaxPartitions).
struct ReplicaGroups {
  std::vector<int64_t> flat;
  int64_t group_size = 1;

  int64_t num_partitions() const { return static_cast<int64_t>(flat.size()); }
  int64_t num_groups() const { return num_partitions() / group_size; }
  // Members of group g, in group order.
  std::vector<int> group(int64_t g) const;
  // The group holding partition p and p's rank in it ({-1, -1} when p is not in [0, N)).
  struct Position {
    int64_t group = -1;
    int rank = -1;
  };
  Position position_of(int64_t partition) const;
};
absl::StatusOr<ReplicaGroups> get_replica_groups(std::string_view op, const Attrs& attrs);
absl::Status validate_replica_groups(std::string_view op, std::span<const int64_t> flat, int64_t group_size);

// The `reduce` attribute as a ReduceOp (0 sum, 1 max, 2 min, 3 prod).
absl::StatusOr<ReduceOp> get_reduce_op(std::string_view op, const Attrs& attrs);

// source_target_pairs, validated: even length, ids in [0, kMaxPartitions), each source and each target
// at most once.
// Returned as (source, target) pairs.
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> get_source_target_pairs(std::string_view op,
                                                                                   const Attrs& attrs);

// (partition / prod(mesh_shape[axis+1:])) % mesh_shape[axis].
int64_t axis_index_value(std::span<const int64_t> mesh_shape, int64_t axis, int64_t partition);

// Attributes for building the ops (sorted names as Attrs stores them).
Attrs all_reduce_attrs(ReduceOp op, std::vector<int64_t> replica_groups, int64_t group_size);
Attrs all_gather_attrs(int64_t dimension, std::vector<int64_t> replica_groups, int64_t group_size);
Attrs reduce_scatter_attrs(int64_t dimension, ReduceOp op, std::vector<int64_t> replica_groups,
                           int64_t group_size);
Attrs all_to_all_attrs(int64_t split_dimension, int64_t concat_dimension, std::vector<int64_t> replica_groups,
                       int64_t group_size);
Attrs collective_permute_attrs(std::vector<int64_t> source_target_pairs);
Attrs axis_index_attrs(std::vector<int64_t> mesh_shape, int64_t axis);

}  // namespace mcx::ir
