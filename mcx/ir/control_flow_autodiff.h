// Reverse and forward mode through scan (op.h, opset 7), used by autodiff.cc and forward.cc. Internal to
// the IR layer.
//
// The forward scan is replayed with residuals: its body also returns the carries it was given, so the scan
// stacks the carry of every iteration (memory: length x the carries, as a checkpointed scan body in JAX).
// The backward pass is one scan in the opposite direction whose body is the VJP of the forward body
// (vjp_program, so nested loops differentiate recursively): it recomputes the body's forward values from
// the stacked carry of its iteration and carries the cotangents of the floating carries and the summed
// cotangents of the floating constants; it stacks the cotangents of the floating xs.
// Forward mode is one scan over the primal and tangent carries whose body is the JVP of the forward body
// (jvp_program); every floating carry, x and constant gets a tangent (zeros where none is given).
// Errors: thrown as mcx::Error (the autodiff convention), e.g. from an inconclusive symbolic shape.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "mcx/ir/builder.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/program.h"

namespace mcx::ir::internal {

// Zeros of type t (any shape, symbolic included).
ValueId zeros_of(ProgramBuilder& b, const AbstractValue& t);
// The indices in [first, first + count) of p's floating parameters.
std::vector<int> floating_params(const Program& p, int first, int count);

// Emits the scan of `instr` (any sibling) with residuals into b on `operands` (values in b). Returns the
// value of every original result (index = result) followed by the stacked carries (one per carry).
std::vector<ValueId> emit_scan_with_residuals(ProgramBuilder& b, const Instr& instr,
                                              std::span<const ValueId> operands);

// The cotangent contribution to each operand of the scan (-1 where none or not needed). forward: the values
// emit_scan_with_residuals returned (unused by emit_cond_vjp); result_cts: per original result its cotangent, or nullopt (zero).
std::vector<ValueId> emit_scan_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> forward,
                                   std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed);

// The tangent of every result of the scan of `instr` (-1 for non-floating results) given the operands'
// tangents (-1 for zero). The primal results are left to the caller (the scan itself), so that
// linearize_programs finds them outside the tangent computation.
std::vector<ValueId> emit_scan_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> tangents);

// cond (switch): the backward pass is a cond on the same index whose branches are the VJPs of the forward
// branches (each recomputes its forward values from the operands); every backward branch returns the
// cotangents of the shared floating operands and of every branch's floating constants (zeros for the
// other branches'). Forward mode is a cond whose branches are the JVPs of the forward branches.
std::vector<ValueId> emit_cond_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> forward,
                                   std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed);
// while: forward mode is a while loop over the primal and tangent carries (the condition reads the primal
// carries only) whose body is the JVP of the forward body. (Reverse mode has no rule: the trip count is
// unknown when the backward pass is built.)
std::vector<ValueId> emit_while_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                    std::span<const ValueId> tangents);
std::vector<ValueId> emit_cond_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> tangents);

}  // namespace mcx::ir::internal
