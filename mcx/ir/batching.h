// Vectorisation (vmap) as a program transformation: the batched program computes f for every index of a
// new leading batch axis at once, as jax.vmap does. The result is an ordinary Program: it can be jitted,
// differentiated, exported and batched again (nested vmap).
//
// Each value of f is either batched (it carries the batch axis as its axis 0) or not (the same for every
// batch index). An instruction with no batched operand is copied unchanged; otherwise its batching rule
// (batching_rules.cc) emits the batched computation:
//  - element-wise ops, collectives and sharding constraints run on the batched operands, unbatched
//    operands broadcast along the batch axis first;
//  - shape ops, reductions, scans, sorts, windowed reductions and dynamic slices with unbatched starts
//    shift their dimension attributes past the batch axis;
//  - dot_general makes the batch axis a batch dimension of the product (both operands batched) or a free
//    dimension moved to the front (one operand batched); take and scatter_add with unbatched indices move
//    the batch axis behind the indexed axis; conv_general_dilated with a shared kernel merges the batch
//    axis into the image batch dimension;
//  - while, scan and cond: one vectorised op per sibling group (control_flow_batching.h);
//  - every other case (a batched convolution kernel, take/scatter_add/dynamic_slice with batched indices
//    or starts, a batched threefry key, a batched pad value) is unrolled: the op is emitted once per batch index and
//    the results stacked. That needs a concrete batch size; with a symbolic one it is Unimplemented,
//    naming the op.
// Results that do not depend on a batched parameter are broadcast along the batch axis, so every result
// has it.
// Errors: InvalidArgument when batched has the wrong length, no parameter is batched, or the size is not
// positive; Unimplemented as above; shape-rule errors of emitted ops are returned, never thrown.
// Thread-safety: pure function of its arguments.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/dim_expr.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// For f: (p_0..p_{n-1}) -> (r_0..r_{m-1}) builds
//   vf: (q_0..q_{n-1}) -> (s_0..s_{m-1})
// where q_i = p_i.dtype[size, p_i.shape...] if batched[i] and p_i otherwise, and s_j =
// r_j.dtype[size, r_j.shape...]. size may be symbolic (in f's scope).
absl::StatusOr<Program> vmap_program(const Program& f, const std::vector<bool>& batched, const DimExpr& size);

}  // namespace mcx::ir
