// The SPMD partitioner: a global program plus the shardings of its arguments becomes one per-device
// program (identical on every device, as XLA's SPMD partitioner produces) whose values are the local
// shards, with collectives where data must move.
//
// Sharding propagation (forward, in program order) chooses each value's PartitionSpec from its
// operands; sharding_constraint ops and the requested output specs pin values. Rules:
//  - elementwise ops: operands are resharded to the operand sharding that splits the most dimensions;
//  - broadcast_in_dim: operand dims keep their axes when they map to a result dim of the same size; new
//    dims are replicated;
//  - reshape: a sharded dimension is kept when it survives whole (same size and same product of the
//    dimensions before it); otherwise the operand is gathered first;
//  - transpose: the spec is permuted;
//  - reduce_sum/max/min/prod over sharded dims: local reduction, then all_reduce over those axes;
//  - dot_general: batch dims sharded alike on both sides stay sharded (no communication); lhs/rhs free
//    dims keep their axes; contracting dims sharded alike give partial sums + all_reduce(sum); a
//    contracting dim sharded on one side only slices the other side locally (no communication) and
//    all-reduces; axes used twice in the result fall back to gathering the rhs;
//  - conv_general_dilated: the lhs batch dim and the rhs output-feature dim stay sharded (no
//    communication: a batch-sharded convolution runs locally); without feature groups, lhs features and
//    rhs input features sharded alike give partial sums + all_reduce(sum); spatial dims are gathered;
//  - reduce_window: dims without a window (size 1, stride 1, no padding) keep their sharding;
//  - everything else (slice, pad, concatenate, reverse, cumsum, dynamic_slice, take, scatter_add,
//    argmax, iota, constant, threefry, ...): dimensions the op leaves untouched keep their sharding
//    where the op's rule allows; otherwise the operands are gathered to replicated (correct, slower).
// Resharding a value between two specs is a per-dimension all_gather (over the axes leaving that
// dimension) followed by a local dynamic_slice (for the axes arriving), using axis_index for offsets;
// axes that leave one dimension exactly as the next axes arriving at another move with one all_to_all.
// A value resharded to the same spec twice is resharded once. Partial results (reductions and dots over
// sharded dimensions) are all-reduced right after the local op: no consumer ever sees a partial value.
// Mesh axes of size 1 split nothing and are ignored (no collectives over them); a 1-device mesh gives a
// per-device program without collectives or axis_index, runnable as partition 0 of 1.
// Offsets are i32 (axis_index's dtype): dimensions above 2^31-1 are InvalidArgument.
//
// Thread-safety: pure function.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/spmd/partition_spec.h"

namespace mcx::spmd {

struct PartitionStats {
  // Collective ops emitted into the per-device program, by kind.
  int all_reduces = 0;
  int all_gathers = 0;
  int all_to_alls = 0;
  int local_slices = 0;      // reshards that needed no communication
  int fallback_gathers = 0;  // operands gathered to replicated because no rule applied
  std::vector<std::string> notes;  // one line per fallback: "[partition] reshape %7: ... gathered"
};

struct PartitionedProgram {
  ir::Program per_device;                // parameters and results are local shards (same name as global)
  std::vector<PartitionSpec> in_specs;   // as given
  // One per result, never Unconstrained: a requested spec is returned as given; its Unconstrained dims
  // are filled with the propagated axes (None when those clash with the fixed dims); an unrequested
  // result gets its propagated spec, with size-1 axes and trailing None dims omitted (replicated: P()).
  std::vector<PartitionSpec> out_specs;
  PartitionStats stats;
};

// Partitions `global` (static shapes; may contain sharding_constraint, must not contain collectives or
// axis_index outside shard_map bodies; custom-rule calls are inlined first, ir/custom_rules.h) for a mesh.
// A shard_map op (ir/shard_map.h) gets its operands resharded to its in_specs and its per-device body
// inlined; its results take its out_specs. Its mesh shape must be this mesh's (InvalidArgument otherwise). in_specs: one fully
// specified spec per parameter. out_specs: empty, or one optional spec per result (nullopt or Unconstrained
// dims: propagated). Errors: InvalidArgument for specs that do not fit the mesh or the value (validate_spec
// messages), for symbolic shapes, or for a program with collectives.
absl::StatusOr<PartitionedProgram> partition(const ir::Program& global, const MeshAxes& mesh,
                                             std::span<const PartitionSpec> in_specs,
                                             std::span<const std::optional<PartitionSpec>> out_specs);

}  // namespace mcx::spmd
