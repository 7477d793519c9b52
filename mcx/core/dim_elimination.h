// Bounds of one integer variable implied by a system of linear inequalities over integer variables, by
// Fourier-Motzkin elimination with integer tightening. SymbolicScope (dim_expr.h) uses it with the monomials
// of dimension expressions as the variables: the scope's constraints, each operation atom's defining
// inequalities (max(a, b) >= a, k*(x // k) <= x < k*(x // k) + k, ...) and each monomial's interval bounds
// together decide what interval arithmetic alone cannot (chains and combinations of constraints).
// Internal to mcx/core.
//
// Soundness: every derived row is implied by the rows given, for integer points (a row whose coefficients
// share a factor g is divided by g and its constant floored, which only removes non-integer solutions), so
// the bounds returned always contain every integer solution's value. Completeness is bounded: a system whose
// elimination would exceed kMaxRows rows, or whose coefficients would overflow, gives up and returns no bound
// (or drops the rows that would overflow), never a wrong one.
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace mcx {

// sum_i coeffs[i] * x_i + constant >= 0; coeffs has one entry per variable of the system.
struct LinearRow {
  std::vector<int64_t> coeffs;
  int64_t constant = 0;
};

struct EliminationBounds {
  bool infeasible = false;  // the rows have no integer solution (a constant row < 0 was derived)
  int64_t lo = std::numeric_limits<int64_t>::min();  // min: no lower bound found
  int64_t hi = std::numeric_limits<int64_t>::max();  // max: no upper bound found
};

inline constexpr std::size_t kMaxEliminationRows = 2000;

// The bounds of variable `query` over the integer solutions of rows (each >= 0) in num_vars variables.
// With query = -1 only feasibility is decided (infeasible set when a contradiction is derived).
EliminationBounds eliminate_for_bounds(const std::vector<LinearRow>& rows, int num_vars, int query);

}  // namespace mcx
