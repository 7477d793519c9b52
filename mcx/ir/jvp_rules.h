// Per-op JVP (forward-mode) rules used by forward.cc. Internal to the IR layer.
//
// Three kinds of rule, chosen per op (jvp_rules.cc lists each op's kind):
//  - linear ops (add, reshape, slice, reduce_sum, take, all_gather, ...): the tangent is the op applied to
//    the operands' tangents (zeros where an operand has none; integer operands such as indices and
//    predicates keep their primal values);
//  - bilinear ops (mul, dot_general, conv_general_dilated): op(t_a, b) + op(a, t_b);
//  - every other differentiable op: the transpose of its VJP rule. The VJP rule is a map from the result's
//    cotangent to the operands' cotangents that is linear in the cotangent; its transpose maps the operands'
//    tangents to the result's tangent. It is obtained by differentiating that map once more with
//    reverse-mode autodiff (which transposes linear programs), so each such op shares the conventions of its
//    VJP rule (ties of max/min split evenly, abs'(0) = 0, pow's conventions at 0; autodiff.h lists them) and
//    no second copy of its derivative exists.
// Rules read shapes as DimExprs only, so programs with symbolic dimensions differentiate.
#pragma once

#include <span>

#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir::internal {

// Emits into b the tangent of one instruction's result.
//   instr:    the primal instruction (its kind and attributes; operand ids are NOT used)
//   operands: ids in b of the instruction's operands (already emitted primal values)
//   result:   id in b of the instruction's primal result
//   tangents: one per operand: the id in b of its tangent (same type as the operand), or -1 for zero
// Returns the id of the result's tangent (the result's type), or -1 when it is zero (every tangent -1, a
// non-differentiable op, or a non-floating result). Throws mcx::Error if an emitted op is rejected (a bug
// in a rule, or an inconclusive symbolic comparison); forward.cc converts that to a Status.
ValueId emit_jvp_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands, ValueId result,
                      std::span<const ValueId> tangents);

}  // namespace mcx::ir::internal
