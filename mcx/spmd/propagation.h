// Internal to the partitioner: the per-op partitioning rules (sharding propagation, forward).
//
// For one instruction of the global program and the current layouts of its operands, a rule chooses
// the layout each operand must be resharded to, the layout of the result, the attributes of the local
// op (shapes made local) and whether the local results are partial and need an all_reduce. The rules
// are those listed in partitioner.h; an op without a specific rule gathers every operand to replicated
// and computes the op on whole values (correct, slower).
//
// Not handled here (the driver does them): sharding_constraint, and the rejection of collectives and
// axis_index in a global program.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/spmd/layout.h"

namespace mcx::spmd::internal {

struct OpPlan {
  std::vector<Layout> operands;        // the layout each operand is resharded to before the local op
  Layout result;                       // the layout of the result after reduce_axes are all-reduced
  ir::Attrs attrs;                     // the local op's attributes
  AxisList reduce_axes;                // non-empty: the local result is partial over these axes
  int64_t reduce_op = 0;               // ReduceOp of the all_reduce (0 sum, 1 max, 2 min, 3 prod)
  std::vector<std::string> fallbacks;  // one note per operand gathered because no rule kept its axes
};

// Plans instruction `index` of `global` (static shapes) whose operands currently have
// `operand_layouts`. InvalidArgument for attributes the rule cannot read.
absl::StatusOr<OpPlan> plan_instr(const ir::Program& global, int index, std::span<const Layout> operand_layouts,
                                  const MeshAxes& mesh);

// Global (static) dims of a value.
std::vector<int64_t> static_dims(const ir::Program& program, ir::ValueId v);

}  // namespace mcx::spmd::internal
