// Internal to the partitioner: the plan for an op with regions (the control-flow ops while, scan and cond;
// custom-rule calls are inlined before partitioning). Each region is partitioned itself (spmd::partition,
// so nested loops recurse) into a per-device region, which then runs every iteration on local shards with
// its collectives inside:
//  - scan: the carries keep their layouts through the loop (the body reshards its new carries to them);
//    the xs are split as they are except along the scanned dimension (gathered there when split); the body
//    sees the slices' layouts; a stacked y is laid out as the body's y (propagated) with the scanned
//    dimension whole.
//  - while: the carries keep their layouts; cond and body see the carries' and their constants' layouts;
//    cond's bool[] is replicated.
//  - cond: the index is replicated; branch 0's result layouts are propagated and every other branch
//    reshards its results to them.
// Errors: those of spmd::partition for a region, prefixed with the op and the region.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/program.h"
#include "mcx/spmd/layout.h"
#include "mcx/spmd/partitioner.h"

namespace mcx::spmd::internal {

struct RegionOpPlan {
  ir::Attrs attrs;               // the op's attributes with the per-device regions
  std::vector<Layout> operands;  // the layout each operand must be in
  std::vector<Layout> results;   // every result's layout, in result order
  PartitionStats stats;          // the regions' fallbacks
};

// Adds `from`'s counts and notes (each followed by note_suffix) to `into`.
void add_stats(PartitionStats& into, PartitionStats from, const std::string& note_suffix = "");

// The plan for instruction `index` of global (an op with regions, any sibling) given its operands' layouts.
absl::StatusOr<RegionOpPlan> plan_region_op(const ir::Program& global, int index,
                                            std::span<const Layout> operand_layouts, const MeshAxes& mesh);

}  // namespace mcx::spmd::internal
