// Per-op batching rules used by batching.cc (batching.h describes them). Internal to the IR layer.
#pragma once

#include <span>
#include <vector>

#include "mcx/core/dim_expr.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir::internal {

// Emits into b the batched form of one instruction.
//   instr:    the instruction (its kind and attributes; operand ids are NOT used)
//   operands: ids in b of the operands; operand k carries the batch axis as axis 0 iff batched[k]
//   size:     the batch size (at least one operand is batched)
// Returns the id of the batched result (batch axis 0). Throws mcx::Unimplemented when the op can only be
// unrolled and size is symbolic, and mcx::Error when an emitted op is rejected; batching.cc converts both
// to a Status.
ValueId emit_batching_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                           const std::vector<bool>& batched, const DimExpr& size);

// x (unbatched) broadcast along a new leading axis of the given size.
ValueId broadcast_batch(ProgramBuilder& b, ValueId x, const DimExpr& size);

}  // namespace mcx::ir::internal
