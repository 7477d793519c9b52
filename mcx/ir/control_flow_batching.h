// vmap through the ops with regions (op.h, opsets 7 and 8), used by batching.cc. Internal to the IR layer.
//
// A sibling group is batched as a whole, at its first sibling, into one vectorised op (not one op per batch
// element):
//  - scan: every carry is batched (unbatched initial carries are broadcast); batched xs are transposed so
//    that the scanned axis leads ([T, B, ...]); the body is vmap_program of the body; stacked outputs come
//    back as [T, B, ...] and are transposed to [B, T, ...];
//  - while: every carry is batched; the loop runs while the condition holds for any batch element, and the
//    body keeps the carries of the elements whose condition is false (a select), as jax.vmap does;
//  - cond: with an unbatched index, one cond of the vmapped branches; with a batched index every branch
//    runs on the whole batch and each element selects its branch's result (as JAX, which turns a batched
//    cond into select).
//  - custom_vjp_call, custom_jvp_call: custom_rules.h.
// Every result of the group is batched. Errors are thrown as mcx::Error (batching.cc converts them).
#pragma once

#include <span>
#include <vector>

#include "mcx/core/dim_expr.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir::internal {

// Every result of the group of `instr` (in result order), batched along axis 0.
std::vector<ValueId> emit_control_flow_batching(ProgramBuilder& b, const Instr& instr,
                                                std::span<const ValueId> operands, const std::vector<bool>& batched,
                                                const DimExpr& size);

}  // namespace mcx::ir::internal
