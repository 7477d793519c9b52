// Reverse-mode autodiff as a program transformation: the result is again a Program, so it can be
// jitted, printed, differentiated again and exported.
//
// The gradient program replays the primal instructions, then emits each op's VJP rule (vjp_rules.h) in
// reverse order. Rules are ordinary ops, so grad of grad works to any order. Rules read shapes as DimExprs,
// so programs with symbolic dimensions differentiate; the result keeps f's SymbolicScope.
// Only "active" values get cotangents: floating values that depend on a wrt parameter through
// differentiable ops and reach a result; other values cost nothing in the backward pass. Cotangents of
// values used several times are summed. Conventions (as JAX): ties of max/min and reduce_max/reduce_min
// split the cotangent evenly among the tied elements; abs'(0) = 0; pow's d/dy at x == 0 is 0 and d/dx at
// y == 0 is 0; convert passes cotangents only between floating types; integer-valued, bool and
// non-differentiable ops (sign floor ceil round comparisons argmax/argmin iota constant stop_gradient
// threefry2x32 is_finite not and or xor) contribute zero.
// Values inside remat regions (remat_barrier, remat.h) are recomputed in the backward pass from the
// region's inputs rather than read from the forward pass, so they need not stay live in between.
// Errors: InvalidArgument for bad wrt indices or non-floating wrt parameters; shape-rule errors of the
// emitted ops (e.g. an inconclusive symbolic comparison) are returned, never thrown.
// Thread-safety: pure functions of their arguments (inline_program mutates only the given builder).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// For f: (p_0..p_{n-1}) -> (r_0..r_{m-1}) builds
//   vjp_f: (p_0..p_{n-1}, ct_0..ct_{m-1}) -> (r_0..r_{m-1}, g_{wrt[0]}..g_{wrt[k-1]})
// where ct_j has r_j's type and g_i has p_i's type. Params in wrt must be floating (InvalidArgument
// naming the parameter otherwise). Non-differentiable ops and stop_gradient pass zero cotangents.
absl::StatusOr<Program> vjp_program(const Program& f, const std::vector<int>& wrt);

// For f with a single floating scalar result: (p...) -> (value, g_{wrt[0]}..g_{wrt[k-1]}).
// InvalidArgument when the result is not a scalar or not floating.
absl::StatusOr<Program> value_and_grad_program(const Program& f, const std::vector<int>& wrt);

// Appends callee's instructions to b with its parameters bound to args; returns the callee's results.
// InvalidArgument when the argument count differs or an argument's type differs from the parameter's
// (dimensions compared with b's scope). callee's scope constraints are not copied into b.
absl::StatusOr<std::vector<ValueId>> inline_program(ProgramBuilder& b, const Program& callee,
                                                    std::span<const ValueId> args);

namespace internal {
// InvalidArgument ("[<api>] ...") unless every index in wrt names a floating parameter of f. Shared by the
// reverse- and forward-mode transformations (forward.h).
absl::Status check_wrt(const Program& f, const std::vector<int>& wrt, std::string_view api);
}  // namespace internal

}  // namespace mcx::ir
