// Reverse-mode autodiff as a program transformation: the result is again a Program, so it can be
// jitted, printed, differentiated again and exported.
#pragma once

#include <span>
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
absl::StatusOr<std::vector<ValueId>> inline_program(ProgramBuilder& b, const Program& callee,
                                                    std::span<const ValueId> args);

}  // namespace mcx::ir
