// The custom-rule calls of opset 8 (op.h: custom_vjp_call, custom_jvp_call; control_flow.h decodes their
// attributes): running them and transforming them.
//
//  - Running: inline_custom_calls replaces each call by its function `fun`, so a backend or the
//    partitioner never sees the rule (CpuExecutable::compile and spmd::partition call it first).
//  - Reverse mode (autodiff.cc): custom_vjp_call replays `fwd` in the forward pass (its outputs and
//    residuals) and runs `bwd` on the residuals and the output cotangents, as jax.custom_vjp.
//    custom_jvp_call transposes its rule: the cotangents of the args are the VJP, with respect to the
//    tangent parameters, of `jvp`'s tangent outputs (exact because jvp is linear in the tangents; the
//    backward pass recomputes jvp from the args), as JAX transposes a custom JVP.
//  - Forward mode (forward.cc): custom_jvp_call runs `jvp` on the args and their tangents (zeros where none
//    is given); custom_vjp_call has no forward rule (control_flow_autodiff_error says so, as JAX).
//  - vmap (batching.cc): one call of the vmapped regions, every arg batched (unbatched ones broadcast, so
//    that bwd's cotangents keep the args' types); the constants keep their batching.
// Differentiating with respect to an array a region closes over (an operand after the args) is
// InvalidArgument naming the region: a custom rule gives no derivative for it, and a zero would be a
// silent wrong answer (JAX refuses too; pass the array as an argument).
// Errors: inline_custom_calls returns a Status; the internal emitters throw mcx::Error (the convention of
// the transformations that call them).
// Thread-safety: pure functions (the emitters mutate only the given builder).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/dim_expr.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// program with every custom-rule call (of program itself; a backend inlines those of regions when it
// compiles them) replaced by its `fun`. Returns an equal program when there is none.
absl::StatusOr<Program> inline_custom_calls(const Program& program);

namespace internal {

// Reverse mode, forward pass of custom_vjp_call `instr` (any sibling): fwd inlined on the operands; returns
// the outputs then the residuals.
std::vector<ValueId> emit_custom_vjp_forward(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands);

// Reverse mode, backward pass: the cotangent contribution to each operand (-1 where none or not needed).
// forward: what emit_custom_vjp_forward returned (unused for custom_jvp_call); result_cts: per output its
// cotangent, or nullopt (zero); needed: per operand whether its cotangent is wanted.
std::vector<ValueId> emit_custom_call_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                          std::span<const ValueId> forward,
                                          std::span<const std::optional<ValueId>> result_cts,
                                          const std::vector<bool>& needed);

// Forward mode: for custom_jvp_call, the tangent of every output (-1 for non-floating outputs) given the
// operands' tangents (-1 for zero). A custom_vjp_call defines no forward rule: Unimplemented with JAX's
// refusal (control_flow_autodiff_error), not a missing feature.
std::vector<ValueId> emit_custom_call_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                         std::span<const ValueId> tangents);

// vmap: every output of the call of `instr`, batched along axis 0.
std::vector<ValueId> emit_custom_call_batching(ProgramBuilder& b, const Instr& instr,
                                               std::span<const ValueId> operands, const std::vector<bool>& batched,
                                               const DimExpr& size);

}  // namespace internal
}  // namespace mcx::ir
