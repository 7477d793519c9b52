// Forward-mode autodiff as program transformations: jvp_program pushes tangents forward alongside the
// primal computation; linearize_programs splits that into the primal part (run once) and the linear part
// (run per tangent), as jax.linearize does. Both results are ordinary Programs: they can be jitted,
// printed, differentiated again (forward over reverse gives Hessian-vector products) and exported.
//
// Each instruction's tangent comes from its JVP rule (jvp_rules.h): linear ops apply themselves to the
// tangents, bilinear ops use the product rule, and every other op uses the transpose of its VJP rule, so
// forward and reverse mode share one set of derivative conventions (autodiff.h lists them). Only values
// that depend on a wrt parameter through differentiable ops and are floating carry a tangent; the
// tangents of the other results are zeros of the result's type (JAX returns float0 tangents for integer
// outputs; mcx has no float0 dtype).
// Errors: InvalidArgument for bad wrt indices or non-floating wrt parameters (as vjp_program); shape-rule
// errors of the emitted ops are returned, never thrown.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"

namespace mcx::ir {

// For f: (p_0..p_{n-1}) -> (r_0..r_{m-1}) builds
//   jvp_f: (p_0..p_{n-1}, t_{wrt[0]}..t_{wrt[k-1]}) -> (r_0..r_{m-1}, rt_0..rt_{m-1})
// where t_i has p_i's type and rt_j has r_j's type. Dead code is removed.
absl::StatusOr<Program> jvp_program(const Program& f, const std::vector<int>& wrt);

// The jvp program split at the boundary between values that do not depend on the tangents and values
// that do:
//   primal: (p_0..p_{n-1}) -> (r_0..r_{m-1}, residual_0..residual_{q-1})
//   linear: (residual_0..residual_{q-1}, t_{wrt[0]}..t_{wrt[k-1]}) -> (rt_0..rt_{m-1})
// Residuals are the primal values the linear part reads; values computed from constants alone are
// recomputed in the linear part instead of being passed. linear is linear in the tangents.
struct LinearizedPrograms {
  Program primal;
  Program linear;
  int num_residuals = 0;
};
absl::StatusOr<LinearizedPrograms> linearize_programs(const Program& f, const std::vector<int>& wrt);

}  // namespace mcx::ir
