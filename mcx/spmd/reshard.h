// Internal to the partitioner: emits the per-device ops that move data between layouts.
//
// Resharding a value from layout A to layout B (both valid for its global dims), per dimension d with
// p = the longest common prefix of A[d] and B[d]:
//  1. all_to_all: when the axes leaving d (A[d][p:]) are exactly the next axes arriving at another
//     dimension e that loses nothing, one all_to_all (split e, concat d) moves them;
//  2. all_gather: the remaining leaving axes of d are gathered with one all_gather on d over those axes
//     (group order = the axes in order, first major, so the blocks concatenate in index order);
//  3. dynamic_slice: the axes arriving at d (B[d] beyond what d now has) cut the local block; the offset
//     is (linear index of the device over those axes) * (new local size), from axis_index ops.
// Step 3 needs no communication; a reshard made of step 3 alone counts as a local slice.
//
// Thread-safety: an Emitter is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/builder.h"
#include "mcx/spmd/layout.h"
#include "mcx/spmd/partitioner.h"

namespace mcx::spmd::internal {

class Emitter {
 public:
  Emitter(ir::ProgramBuilder& builder, const MeshAxes& mesh, PartitionStats& stats)
      : b_(builder), mesh_(mesh), stats_(stats) {}

  ir::ProgramBuilder& builder() { return b_; }
  const MeshAxes& mesh() const { return mesh_; }
  PartitionStats& stats() { return stats_; }

  // The local value holding `local` (a value of global dims `dims` laid out as `from`) laid out as `to`.
  // Both layouts must be valid for dims (Internal otherwise).
  absl::StatusOr<ir::ValueId> reshard(ir::ValueId local, std::span<const int64_t> dims, const Layout& from,
                                      const Layout& to);

  // all_reduce of `local` over the given axes (every position's group: the positions differing only in
  // those axes) with reduce op 0 sum, 1 max, 2 min, 3 prod. No axes: returns local unchanged.
  absl::StatusOr<ir::ValueId> all_reduce(ir::ValueId local, const AxisList& axes, int64_t reduce_op);

  // The device's i32 coordinate on a mesh axis (one axis_index op per axis, reused).
  absl::StatusOr<ir::ValueId> axis_coordinate(int axis);
  // An i32 scalar constant (reused).
  ir::ValueId i32(int64_t v);

 private:
  std::vector<int64_t> flat_groups(const AxisList& axes) const;

  ir::ProgramBuilder& b_;
  const MeshAxes& mesh_;
  PartitionStats& stats_;
  std::map<int, ir::ValueId> axis_index_;
  std::map<int64_t, ir::ValueId> i32_;
};

}  // namespace mcx::spmd::internal
