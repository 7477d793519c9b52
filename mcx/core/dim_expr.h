// Symbolic dimensions.
//
// A DimExpr is a normalised polynomial with integer coefficients over atoms; an atom is a named dimension
// variable ("b") or a non-polynomial operation on DimExprs: floordiv(a, b), mod(a, b), max(a, b),
// min(a, b). A concrete dimension is just a constant polynomial. Normalisation (sorted monomials,
// merged coefficients, zero terms dropped, operations on constants folded, max/min operands ordered)
// makes operator== total: two DimExprs are equal iff their normal forms are identical.
//
// Text form (parse/to_string round-trip exactly on the normal form):
//   "b", "2*b + 1", "b*c - 3", "b^2" (printed as "b^2"), "c // 2", "b % 4", "max(b, 16)", "min(b, c)",
//   "(b + 1) // 2". Variables are identifiers [A-Za-z_][A-Za-z0-9_]* other than "_" (which a
// shape specification reserves); a leading "+" is accepted ("+ a - b").
//
// Simplifications beyond polynomial normalisation (all value-preserving for integer variables):
// constant folding of every operation; x // 1 == x; (k*x + r) // k == x + r // k and
// (k*x + r) % k == r % k for constant k > 0 (terms whose coefficient k divides move out); exact
// polynomial division by a symbolic divisor ((b*c + b) // b == c + 1); (x // k1) // k2 == x // (k1*k2);
// max/min of operands whose difference has a decided sign (every variable >= 1: max(b, 1) == b).
// Coefficients are int64 and overflow is not checked.
//
// Thread-safety: a DimExpr is immutable (shared normal form); copies may be used from any thread.
//
// Ordering: comparisons are decided from bounds (every variable >= 1, or >= 0 where a scope declares
// "zero_sized(v)", plus the constraints of a
// SymbolicScope such as "b >= 16" or "b == 2*c"). When the bounds cannot decide, the comparison fails with
// an InvalidArgument "inconclusive dimension comparison" error that names both expressions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx {

class DimExpr {
 public:
  DimExpr();                   // the constant 0
  DimExpr(int64_t constant);   // NOLINT: implicit, so concrete dims read naturally
  static DimExpr var(std::string_view name);  // name must be an identifier (checked by parse, asserted here)

  // Parses one expression; errors name the offending text and position.
  static absl::StatusOr<DimExpr> parse(std::string_view text);

  bool is_constant() const;
  std::optional<int64_t> constant_value() const;
  // The constant value; InvalidArgument naming the expression when it is symbolic.
  absl::StatusOr<int64_t> to_int() const;
  // Sorted names of all variables that occur (also inside floordiv/mod/max/min).
  std::vector<std::string> variables() const;

  // Value for concrete variable values; InvalidArgument when a variable is unbound or a division by zero.
  absl::StatusOr<int64_t> evaluate(const std::map<std::string, int64_t>& env) const;
  // The expression computed in another arithmetic (e.g. staged array operations, to use a dimension as a
  // value): the caller keeps the values and names them by handles; fold asks for each variable, constant and
  // operation once per occurrence and returns the handle of the result. An operand shared by several places
  // (expressions share subexpressions) is folded once and its handle reused. Operations: '+', '*', '/' (floor
  // division), '%' (modulo with the divisor's sign), 'M' (max), 'm' (min).
  struct Algebra {
    std::function<int(const std::string& var)> variable;
    std::function<int(int64_t value)> constant;
    std::function<int(char op, int lhs, int rhs)> binary;
  };
  int fold(const Algebra& algebra) const;
  // Replaces variables by expressions (variables not in the map stay), renormalising.
  DimExpr substitute(const std::map<std::string, DimExpr>& env) const;

  // When the expression is k*v + c for one variable v (k != 0), returns {v, k, c}; used to solve
  // dimension variables from concrete shapes.
  struct Linear { std::string var; int64_t factor; int64_t offset; };
  std::optional<Linear> as_linear_in_one_var() const;

  std::string to_string() const;
  size_t hash() const;

  friend DimExpr operator+(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a);
  friend DimExpr operator*(const DimExpr& a, const DimExpr& b);
  friend bool operator==(const DimExpr& a, const DimExpr& b);
  friend bool operator!=(const DimExpr& a, const DimExpr& b) { return !(a == b); }
  // A total order on normal forms (for use as map keys); not a numeric comparison.
  friend bool structurally_less(const DimExpr& a, const DimExpr& b);

  struct Impl;

 private:
  explicit DimExpr(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;  // never null
  friend struct DimExprOps;
};

// Namespace-scope declaration so that &structurally_less can be named; DimExprLess is the comparator
// for std::map / std::set keys.
bool structurally_less(const DimExpr& a, const DimExpr& b);
struct DimExprLess {
  bool operator()(const DimExpr& a, const DimExpr& b) const { return structurally_less(a, b); }
};

// floor division and modulo with Python semantics (divisor must be non-zero; for symbolic divisors the
// sign must be decidable when evaluating). Constant operands fold; x // 1 == x; (k*x) // k == x.
DimExpr floordiv(const DimExpr& a, const DimExpr& b);
DimExpr mod(const DimExpr& a, const DimExpr& b);
DimExpr max(const DimExpr& a, const DimExpr& b);
DimExpr min(const DimExpr& a, const DimExpr& b);

// A set of constraints over dimension variables; the context in which comparisons are decided.
// Constraints are ">=", "<=", ">", "<" or "==" between two expressions. An "==" constraint whose left
// side (else right side) is a single term k*m is also used to rewrite, as JAX's normalisation rules do:
// a variable or atom ("b == 2*c", "max(a, b) == c") is replaced everywhere, a term k*m replaces the
// terms c*m with k | c ("2*b == c" rewrites 4*b to 2*c); "mod(e, k) == 0" also rewrites k*(e // k) to e.
// Two "==" constraints rewriting the same term are an error.
// Thread-safety: immutable after create(); copies share state and may be used from any thread.
class SymbolicScope {
 public:
  SymbolicScope() = default;
  // InvalidArgument for a malformed constraint, naming it.
  static absl::StatusOr<SymbolicScope> create(const std::vector<std::string>& constraints);
  const std::vector<std::string>& constraints() const { return constraints_text_; }

  // Lower and upper bounds (upper may be +inf = INT64_MAX) of e given variables >= 1 and constraints.
  std::pair<int64_t, int64_t> bounds(const DimExpr& e) const;

  // Decided comparisons; InvalidArgument "inconclusive dimension comparison: a >= b" otherwise.
  absl::StatusOr<bool> ge(const DimExpr& a, const DimExpr& b) const;
  absl::StatusOr<bool> gt(const DimExpr& a, const DimExpr& b) const;
  absl::StatusOr<bool> le(const DimExpr& a, const DimExpr& b) const { return ge(b, a); }
  absl::StatusOr<bool> lt(const DimExpr& a, const DimExpr& b) const { return gt(b, a); }
  // Equality after applying the scope's "==" rewrites; never inconclusive for identical normal forms.
  bool known_equal(const DimExpr& a, const DimExpr& b) const;

  // Variables declared "zero_sized(v)" among the constraints: they may be 0, a dimension of size 0; every other
  // variable is at least 1 (docs/shape_polymorphism.md, "Dimensions of size 0").
  const std::set<std::string>& zero_allowed() const;

  // Checks every constraint for concrete variable values; the error names the constraint and values.
  absl::Status check(const std::map<std::string, int64_t>& env) const;

  struct Constraint { DimExpr lhs; std::string op; DimExpr rhs; };
  const std::vector<Constraint>& parsed() const { return parsed_; }

 private:
  struct State;  // rewrites and derived atom bounds, computed once by create()
  friend std::pair<int64_t, int64_t> interval_bounds(const DimExpr& e);  // dim_expr_internal.h
  friend class ZeroSizedVariables;
  // The state of this thread's innermost ZeroSizedVariables (its zero-sized variables only), or null.
  static const State*& zero_sized_state();
  static absl::Status add_equality_rules(const Constraint& c, const std::string& text, State* state);
  std::vector<std::string> constraints_text_;
  std::vector<Constraint> parsed_;
  std::shared_ptr<const State> state_;  // null for the empty scope
};

// While alive, expressions built on this thread treat the scope's zero_allowed() variables as >= 0 (not >= 1)
// when they decide an order at construction (max(b, 1) stays max(b, 1) when b may be 0). The tracer holds one
// for the scope it traces under (trace_state.h). Not copyable; nests (the innermost wins).
class ZeroSizedVariables {
 public:
  explicit ZeroSizedVariables(const SymbolicScope& scope);
  ~ZeroSizedVariables();
  ZeroSizedVariables(const ZeroSizedVariables&) = delete;
  ZeroSizedVariables& operator=(const ZeroSizedVariables&) = delete;

 private:
  const SymbolicScope::State* previous_;
  std::shared_ptr<const SymbolicScope::State> state_;  // the scope's zero-sized variables only; null for none
};

}  // namespace mcx

template <>
struct std::hash<mcx::DimExpr> {
  size_t operator()(const mcx::DimExpr& e) const { return e.hash(); }
};
