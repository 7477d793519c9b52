// Per-op VJP rules used by autodiff.cc. Internal to the IR layer.
//
// Every rule is written as ops emitted through ProgramBuilder, so the gradient program is an ordinary
// Program that can be differentiated again. Rules read shapes as DimExprs only (never concrete ints), so
// programs with symbolic dimensions differentiate.
#pragma once

#include <span>
#include <vector>

#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir::internal {

// Emits into b the cotangent contributions of one instruction of the primal program.
//   instr:    the primal instruction (its kind and attributes; operand ids are NOT used)
//   operands: ids in b of the instruction's operands (already emitted primal values)
//   result:   id in b of the instruction's primal result
//   ct:       id in b of the result's cotangent (same type as result)
//   needed:   needed[i] says whether operand i's cotangent is wanted (rules skip the others)
// Returns one entry per operand: the id of the contribution (same type as the operand), or -1 for none
// (zero, not needed, or not differentiable). Non-differentiable ops return all -1.
//
// Ties of reduce_max/reduce_min and max/min split the cotangent evenly among the tied elements, as JAX
// does; reduce_window max/min give each window's cotangent to its first maximal (minimal) element, as
// XLA's select-and-scatter does. Throws mcx::Error if an emitted op is rejected (a bug in a rule, or an
// inconclusive symbolic comparison); autodiff.cc converts that to a Status.
std::vector<ValueId> emit_vjp_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   ValueId result, ValueId ct, const std::vector<bool>& needed);

// The rules of the windowed ops (vjp_window_rules.cc; op.h describes them), called by emit_vjp_rule with
// the same arguments: conv_general_dilated's two contributions, and reduce_window's one.
std::vector<ValueId> conv_vjp_rule(ProgramBuilder& b, const Instr& instr, ValueId lhs, ValueId rhs, ValueId ct,
                                   const std::vector<bool>& needed);
ValueId reduce_window_vjp_rule(ProgramBuilder& b, const Instr& instr, ValueId x, ValueId result, ValueId ct);

}  // namespace mcx::ir::internal
