// Internal representation of DimExpr, shared by dim_expr.cc and symbolic_scope.cc. Not part of the
// public API: include only from mcx/core sources.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mcx/core/dim_expr.h"

namespace mcx {

enum class AtomKind : uint8_t { kVar = 0, kFloorDiv, kMod, kMax, kMin };

// A variable or a non-polynomial operation. Operation atoms are built only through floordiv/mod/max/min,
// which normalise them (constant folding, operand order), so structural equality is meaningful.
struct Atom {
  AtomKind kind = AtomKind::kVar;
  std::string name;           // kVar only
  std::vector<DimExpr> args;  // two operands for the operations
};

using Factor = std::pair<Atom, int>;   // atom^power, power >= 1
using Monomial = std::vector<Factor>;  // sorted by compare_atom, no repeated atom; empty = constant 1
struct Term {
  Monomial mono;
  int64_t coeff = 0;
};

// Terms sorted by compare_monomial (higher degree first, the constant last), no zero coefficients,
// no repeated monomials.
struct DimExpr::Impl {
  std::vector<Term> terms;
  size_t hash = 0;  // structural hash of terms, computed once at construction
};

int compare_atom(const Atom& a, const Atom& b);
int compare_monomial(const Monomial& a, const Monomial& b);
int compare_expr(const DimExpr& a, const DimExpr& b);

struct DimExprOps {
  static const std::vector<Term>& terms(const DimExpr& e) { return e.impl_->terms; }
  // Sorts, merges equal monomials and drops zero coefficients.
  static DimExpr make(std::vector<Term> terms);
  static DimExpr from_atom(Atom a);
  // Identity of the shared normal form (equal ids imply equal expressions, not conversely).
  static const void* id(const DimExpr& e) { return e.impl_.get(); }
};

// m / d when d divides m (every atom of d occurs in m with at least its power), else nullopt.
std::optional<Monomial> divide_monomial(const Monomial& m, const Monomial& d);

// When e is exactly one atom with coefficient 1 and power 1, that atom.
const Atom* as_single_atom(const DimExpr& e);

// Rebuilds e with every atom for which f returns a value replaced by it (renormalising); operation
// atoms that f leaves alone have f applied to their operands.
DimExpr replace_atoms(const DimExpr& e, const std::function<std::optional<DimExpr>(const Atom&)>& f);

DimExpr power(const DimExpr& e, int n);

// True when pred holds for some atom of e, including atoms inside operation operands.
bool any_atom(const DimExpr& e, const std::function<bool(const Atom&)>& pred);

// Bounds of e by interval arithmetic alone, every variable >= 1 (no constraints, no linear reasoning): cheap
// enough for building expressions (max/min decide their operands' order with it).
std::pair<int64_t, int64_t> interval_bounds(const DimExpr& e);

// std::string_view whitespace trimming (Debian's abseil has its own string_view type).
inline std::string_view strip_space(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace mcx
