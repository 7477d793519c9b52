// Checking call arguments against an exported signature and solving its dimension variables, as JAX's
// shape_poly.solve_dim_vars does.
//
// Every dimension of every input gives one equation  expr(vars) = actual. Repeatedly, each unprocessed
// equation has the values found so far substituted; when it becomes k*v + c for one unknown v it
// determines v = (actual - c) / k (the division must be exact and v >= 1); when it has no unknowns left
// it is checked. Equations that never become linear in one unknown (b^2, b*c, b // 2 alone) are checked
// once other equations have determined their variables; if they never are, solving fails. Finally the
// scope constraints ("b >= 16", "b == 2*c") are checked with the values.
//
// Actual dimensions are DimExprs: constants when called with concrete arrays, symbolic when the caller
// itself is being traced with symbolic shapes (then "exact" means the normal forms agree).
//
// Errors (InvalidArgument) start with "[<api>] '<fun_name>': " and name the argument (its path, e.g.
// args[0]['w']), the dimension, the expression and the value found, e.g.
//   "Input shapes do not match the polymorphic shapes specification. Division had remainder 1 when
//    computing the value of 'b' from dimension 0 of args[0] (specification '2*b', found 7)"
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/shape.h"
#include "mcx/ir/program.h"

namespace mcx::exporting {

struct Signature {
  std::string api = "Exported.call";
  std::string fun_name;
  std::vector<std::string> in_names;     // one per input
  std::vector<AbstractValue> in_avals;   // the exported (possibly symbolic) input types
  const SymbolicScope* scope = nullptr;  // the exported constraints (may be null: none)
};

// Checks the number of arguments, dtypes and ranks. Errors name the argument and both types.
absl::Status check_arguments(const Signature& sig, std::span<const AbstractValue> args);

// The dimension variable values for the given argument types (check_arguments first).
absl::StatusOr<std::map<std::string, DimExpr>> solve_dim_vars(const Signature& sig,
                                                              std::span<const AbstractValue> args);

// solve_dim_vars for concrete argument shapes, with the values as integers.
absl::StatusOr<std::map<std::string, int64_t>> solve_dim_values(const Signature& sig,
                                                                std::span<const AbstractValue> args);

// Rewrites program for symbolic dimension values (a caller traced with symbolic shapes): every parameter
// type and dimension attribute has env substituted, and every type is re-inferred under `scope` (the
// caller's constraints). ir::specialize covers the concrete case. Errors: the shape rules' (e.g. an
// inconclusive comparison that the caller's scope cannot decide), prefixed with "[<api>]".
absl::StatusOr<ir::Program> substitute_dim_vars(const ir::Program& program,
                                                const std::map<std::string, DimExpr>& env,
                                                const SymbolicScope& scope, const std::string& api);

}  // namespace mcx::exporting
