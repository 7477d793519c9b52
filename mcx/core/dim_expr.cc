#include "mcx/core/dim_expr.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/dim_expr_internal.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

template <typename T>
int cmp3(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

int degree(const Monomial& m) {
  int d = 0;
  for (const auto& f : m) d += f.second;
  return d;
}

Monomial multiply_monomials(const Monomial& a, const Monomial& b) {
  Monomial out;
  out.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    int c = i == a.size() ? 1 : j == b.size() ? -1 : compare_atom(a[i].first, b[j].first);
    if (c < 0) {
      out.push_back(a[i++]);
    } else if (c > 0) {
      out.push_back(b[j++]);
    } else {
      out.emplace_back(a[i].first, a[i].second + b[j].second);
      ++i;
      ++j;
    }
  }
  return out;
}

// Python floor division and modulo on integers (b != 0).
int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

DimExpr make_op(AtomKind kind, DimExpr a, DimExpr b) {
  Atom atom;
  atom.kind = kind;
  atom.args = {std::move(a), std::move(b)};
  return DimExprOps::from_atom(std::move(atom));
}

// Exact polynomial division by leading terms (as JAX's _divmod does): the quotient q with a == q*b,
// or nullopt when some leading term does not divide or a remainder is left.
std::optional<DimExpr> exact_quotient(const DimExpr& a, const DimExpr& b) {
  const auto& bt = DimExprOps::terms(b);
  if (bt.empty()) return std::nullopt;
  const Term& lead = bt[0];
  DimExpr rest = a;
  std::vector<Term> q;
  for (int steps = 0; steps < 64 && !DimExprOps::terms(rest).empty(); ++steps) {
    const Term& t = DimExprOps::terms(rest)[0];
    if (t.coeff % lead.coeff != 0) return std::nullopt;
    std::optional<Monomial> m = divide_monomial(t.mono, lead.mono);
    if (!m) return std::nullopt;
    Term qt{*std::move(m), t.coeff / lead.coeff};
    q.push_back(qt);
    rest = rest - DimExprOps::make({qt}) * b;
  }
  if (!DimExprOps::terms(rest).empty()) return std::nullopt;
  return DimExprOps::make(std::move(q));
}

// Splits a into k*quotient + rest where quotient collects the terms whose coefficient is a multiple
// of k (k > 0). floor((k*Q + R) / k) = Q + floor(R / k) and (k*Q + R) mod k = R mod k for integer Q.
std::pair<DimExpr, DimExpr> split_multiples(const DimExpr& a, int64_t k) {
  std::vector<Term> q, r;
  for (const Term& t : DimExprOps::terms(a)) {
    if (t.coeff % k == 0) {
      q.push_back({t.mono, t.coeff / k});
    } else {
      r.push_back(t);
    }
  }
  return {DimExprOps::make(std::move(q)), DimExprOps::make(std::move(r))};
}

[[maybe_unused]] bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Ordering and normalisation.

namespace {

// Pairs of distinct representations already found equal during one comparison. Expressions share operands
// (a DAG: max(e + v, v*e - 1) holds e twice), so two equal expressions built apart would otherwise be walked as
// trees, once per path to each shared operand: exponential in the nesting depth. Remembering the equal pairs
// makes a comparison linear in the number of distinct operands. Hash-distinct expressions are never equal,
// so only pairs with equal hashes are looked up or stored.
class EqualPairs {
 public:
  bool known(const void* a, const void* b) const { return pairs_.count({a, b}) > 0; }
  void add(const void* a, const void* b) { pairs_.insert({a, b}); }

 private:
  struct PairHash {
    size_t operator()(const std::pair<const void*, const void*>& p) const {
      return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
  };
  std::unordered_set<std::pair<const void*, const void*>, PairHash> pairs_;
};

int compare_expr_in(const DimExpr& a, const DimExpr& b, EqualPairs& equal);

int compare_atom_in(const Atom& a, const Atom& b, EqualPairs& equal) {
  if (a.kind != b.kind) return cmp3(static_cast<int>(a.kind), static_cast<int>(b.kind));
  if (a.kind == AtomKind::kVar) return a.name.compare(b.name) < 0 ? -1 : (a.name == b.name ? 0 : 1);
  for (size_t i = 0; i < a.args.size() && i < b.args.size(); ++i) {
    if (int c = compare_expr_in(a.args[i], b.args[i], equal)) return c;
  }
  return cmp3(a.args.size(), b.args.size());
}

int compare_monomial_in(const Monomial& a, const Monomial& b, EqualPairs& equal) {
  if (int c = cmp3(degree(b), degree(a))) return c;  // higher degree first
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (int c = compare_atom_in(a[i].first, b[i].first, equal)) return c;
    if (int c = cmp3(b[i].second, a[i].second)) return c;
  }
  return cmp3(a.size(), b.size());
}

int compare_expr_in(const DimExpr& a, const DimExpr& b, EqualPairs& equal) {
  const void* ia = DimExprOps::id(a);
  const void* ib = DimExprOps::id(b);
  if (ia == ib) return 0;
  const bool same_hash = a.hash() == b.hash();
  if (same_hash && equal.known(ia, ib)) return 0;
  const auto& ta = DimExprOps::terms(a);
  const auto& tb = DimExprOps::terms(b);
  for (size_t i = 0; i < ta.size() && i < tb.size(); ++i) {
    if (int c = compare_monomial_in(ta[i].mono, tb[i].mono, equal)) return c;
    if (int c = cmp3(ta[i].coeff, tb[i].coeff)) return c;
  }
  const int c = cmp3(ta.size(), tb.size());
  if (c == 0 && same_hash) equal.add(ia, ib);
  return c;
}

}  // namespace

int compare_atom(const Atom& a, const Atom& b) {
  EqualPairs equal;
  return compare_atom_in(a, b, equal);
}

int compare_monomial(const Monomial& a, const Monomial& b) {
  EqualPairs equal;
  return compare_monomial_in(a, b, equal);
}

int compare_expr(const DimExpr& a, const DimExpr& b) {
  EqualPairs equal;
  return compare_expr_in(a, b, equal);
}

namespace {
size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

size_t hash_terms(const std::vector<Term>& terms) {
  size_t h = 0x51ed270b;
  for (const Term& t : terms) {
    h = mix(h, std::hash<int64_t>()(t.coeff));
    for (const auto& [atom, pow] : t.mono) {
      h = mix(h, static_cast<size_t>(atom.kind) * 31 + static_cast<size_t>(pow));
      if (atom.kind == AtomKind::kVar) {
        h = mix(h, std::hash<std::string>()(atom.name));
      } else {
        for (const DimExpr& a : atom.args) h = mix(h, a.hash());
      }
    }
    h = mix(h, 0xabcdef);  // term separator
  }
  return h;
}
}  // namespace

DimExpr DimExprOps::make(std::vector<Term> terms) {
  std::sort(terms.begin(), terms.end(),
            [](const Term& a, const Term& b) { return compare_monomial(a.mono, b.mono) < 0; });
  std::vector<Term> out;
  out.reserve(terms.size());
  for (Term& t : terms) {
    if (!out.empty() && compare_monomial(out.back().mono, t.mono) == 0) {
      out.back().coeff += t.coeff;
    } else {
      out.push_back(std::move(t));
    }
    if (out.back().coeff == 0) out.pop_back();
  }
  auto impl = std::make_shared<DimExpr::Impl>();
  impl->terms = std::move(out);
  impl->hash = hash_terms(impl->terms);
  return DimExpr(std::shared_ptr<const DimExpr::Impl>(std::move(impl)));
}

DimExpr DimExprOps::from_atom(Atom a) {
  std::vector<Term> t(1);
  t[0].mono.emplace_back(std::move(a), 1);
  t[0].coeff = 1;
  return make(std::move(t));
}

std::optional<Monomial> divide_monomial(const Monomial& m, const Monomial& d) {
  Monomial rest;
  size_t j = 0;
  for (const auto& f : m) {
    if (j < d.size() && compare_atom(f.first, d[j].first) == 0) {
      if (f.second < d[j].second) return std::nullopt;
      if (f.second > d[j].second) rest.emplace_back(f.first, f.second - d[j].second);
      ++j;
    } else {
      rest.push_back(f);
    }
  }
  if (j != d.size()) return std::nullopt;
  return rest;
}

const Atom* as_single_atom(const DimExpr& e) {
  const auto& t = DimExprOps::terms(e);
  if (t.size() == 1 && t[0].coeff == 1 && t[0].mono.size() == 1 && t[0].mono[0].second == 1) {
    return &t[0].mono[0].first;
  }
  return nullptr;
}

DimExpr power(const DimExpr& e, int n) {
  DimExpr out(1);
  for (int i = 0; i < n; ++i) out = out * e;
  return out;
}

namespace {
// Memoised on operand identity so that shared operands are rebuilt once per call.
DimExpr replace_atoms_memo(const DimExpr& e, const std::function<std::optional<DimExpr>(const Atom&)>& f,
                           std::map<const void*, DimExpr>& memo) {
  if (auto it = memo.find(DimExprOps::id(e)); it != memo.end()) return it->second;
  DimExpr sum;
  for (const Term& t : DimExprOps::terms(e)) {
    DimExpr prod(t.coeff);
    for (const auto& [atom, pow] : t.mono) {
      std::optional<DimExpr> r = f(atom);
      if (!r) {
        if (atom.kind == AtomKind::kVar) {
          r = DimExprOps::from_atom(atom);
        } else {
          DimExpr x = replace_atoms_memo(atom.args[0], f, memo);
          DimExpr y = replace_atoms_memo(atom.args[1], f, memo);
          switch (atom.kind) {
            case AtomKind::kFloorDiv: r = floordiv(x, y); break;
            case AtomKind::kMod: r = mod(x, y); break;
            case AtomKind::kMax: r = max(x, y); break;
            default: r = min(x, y); break;
          }
        }
      }
      prod = prod * power(*r, pow);
    }
    sum = sum + prod;
  }
  memo.emplace(DimExprOps::id(e), sum);  // e is alive for the whole call, so its id is not reused
  return sum;
}
}  // namespace

DimExpr replace_atoms(const DimExpr& e, const std::function<std::optional<DimExpr>(const Atom&)>& f) {
  std::map<const void*, DimExpr> memo;
  return replace_atoms_memo(e, f, memo);
}

// ---------------------------------------------------------------------------------------------------
// Construction, queries and arithmetic.

namespace {
const std::shared_ptr<const DimExpr::Impl>& zero_impl() {
  static const auto* z = new std::shared_ptr<const DimExpr::Impl>([] {
    auto impl = std::make_shared<DimExpr::Impl>();
    impl->hash = hash_terms(impl->terms);
    return impl;
  }());
  return *z;
}
}  // namespace

DimExpr::DimExpr() : impl_(zero_impl()) {}
DimExpr::DimExpr(int64_t constant) : impl_(zero_impl()) {
  if (constant != 0) {
    auto impl = std::make_shared<Impl>();
    impl->terms.push_back({Monomial{}, constant});
    impl->hash = hash_terms(impl->terms);
    impl_ = std::move(impl);
  }
}
DimExpr::DimExpr(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

DimExpr DimExpr::var(std::string_view name) {
  assert(is_identifier(name) && "DimExpr::var: name must be an identifier");
  Atom a;
  a.kind = AtomKind::kVar;
  a.name = std::string(name);
  return DimExprOps::from_atom(std::move(a));
}

bool DimExpr::is_constant() const {
  return impl_->terms.empty() || (impl_->terms.size() == 1 && impl_->terms[0].mono.empty());
}

std::optional<int64_t> DimExpr::constant_value() const {
  if (impl_->terms.empty()) return 0;
  if (impl_->terms.size() == 1 && impl_->terms[0].mono.empty()) return impl_->terms[0].coeff;
  return std::nullopt;
}

absl::StatusOr<int64_t> DimExpr::to_int() const {
  if (auto v = constant_value()) return *v;
  return absl::InvalidArgumentError(
      absl::StrCat("[DimExpr::to_int] expected a constant dimension, found symbolic '", to_string(), "'"));
}

namespace {
// Walks each distinct operand once (expressions share operands: a DAG), so pred must be pure.
bool any_atom_in(const DimExpr& e, const std::function<bool(const Atom&)>& pred,
                 std::unordered_set<const void*>& seen) {
  if (!seen.insert(DimExprOps::id(e)).second) return false;
  for (const Term& t : DimExprOps::terms(e)) {
    for (const auto& f : t.mono) {
      if (pred(f.first)) return true;
      for (const DimExpr& a : f.first.args) {
        if (any_atom_in(a, pred, seen)) return true;
      }
    }
  }
  return false;
}
}  // namespace

bool any_atom(const DimExpr& e, const std::function<bool(const Atom&)>& pred) {
  std::unordered_set<const void*> seen;
  return any_atom_in(e, pred, seen);
}

std::vector<std::string> DimExpr::variables() const {
  std::set<std::string> s;
  any_atom(*this, [&](const Atom& a) {
    if (a.kind == AtomKind::kVar) s.insert(a.name);
    return false;
  });
  return {s.begin(), s.end()};
}

namespace {
// Folds each distinct operand once (a DAG walked as a tree is exponential in its depth); the algebra's handle
// for a shared operand is used at every place it occurs.
int fold_in(const DimExpr& e, const DimExpr::Algebra& algebra, std::unordered_map<const void*, int>& handles) {
  if (auto known = handles.find(DimExprOps::id(e)); known != handles.end()) return known->second;
  std::optional<int> sum;
  for (const Term& t : DimExprOps::terms(e)) {
    int prod = algebra.constant(t.coeff);
    for (const auto& [atom, pow] : t.mono) {
      int v;
      if (atom.kind == AtomKind::kVar) {
        v = algebra.variable(atom.name);
      } else {
        const int x = fold_in(atom.args[0], algebra, handles), y = fold_in(atom.args[1], algebra, handles);
        const char op = atom.kind == AtomKind::kFloorDiv ? '/' : atom.kind == AtomKind::kMod ? '%'
                        : atom.kind == AtomKind::kMax    ? 'M' : 'm';
        v = algebra.binary(op, x, y);
      }
      for (int i = 0; i < pow; ++i) prod = algebra.binary('*', prod, v);
    }
    sum = sum ? algebra.binary('+', *sum, prod) : prod;
  }
  const int handle = sum ? *sum : algebra.constant(0);
  handles.emplace(DimExprOps::id(e), handle);
  return handle;
}
}  // namespace

int DimExpr::fold(const Algebra& algebra) const {
  std::unordered_map<const void*, int> handles;
  return fold_in(*this, algebra, handles);
}

namespace {

// Evaluates e, each distinct operand once: expressions share operands (a DAG), and walking it as a tree would
// cost one visit per path, exponential in the nesting depth.
absl::StatusOr<int64_t> evaluate_in(const DimExpr& e, const std::map<std::string, int64_t>& env,
                                    std::unordered_map<const void*, int64_t>& values) {
  if (auto known = values.find(DimExprOps::id(e)); known != values.end()) return known->second;
  auto overflow = [&]() {
    return absl::InvalidArgumentError(
        absl::StrCat("[DimExpr::evaluate] int64 overflow evaluating '", e.to_string(), "'"));
  };
  int64_t sum = 0;
  for (const Term& t : DimExprOps::terms(e)) {
    int64_t prod = t.coeff;
    for (const auto& [atom, pow] : t.mono) {
      int64_t v;
      if (atom.kind == AtomKind::kVar) {
        auto it = env.find(atom.name);
        if (it == env.end()) {
          return absl::InvalidArgumentError(absl::StrCat("[DimExpr::evaluate] dimension variable '",
                                                         atom.name, "' of '", e.to_string(),
                                                         "' has no value"));
        }
        v = it->second;
      } else {
        auto x = evaluate_in(atom.args[0], env, values);
        if (!x.ok()) return x.status();
        auto y = evaluate_in(atom.args[1], env, values);
        if (!y.ok()) return y.status();
        if ((atom.kind == AtomKind::kFloorDiv || atom.kind == AtomKind::kMod) && *y == 0) {
          return absl::InvalidArgumentError(absl::StrCat("[DimExpr::evaluate] division by zero in '",
                                                         e.to_string(), "'"));
        }
        switch (atom.kind) {
          case AtomKind::kFloorDiv: v = py_floordiv(*x, *y); break;
          case AtomKind::kMod: v = py_mod(*x, *y); break;
          case AtomKind::kMax: v = std::max(*x, *y); break;
          default: v = std::min(*x, *y); break;
        }
      }
      for (int i = 0; i < pow; ++i) {
        if (__builtin_mul_overflow(prod, v, &prod)) return overflow();
      }
    }
    if (__builtin_add_overflow(sum, prod, &sum)) return overflow();
  }
  values.emplace(DimExprOps::id(e), sum);
  return sum;
}

}  // namespace

absl::StatusOr<int64_t> DimExpr::evaluate(const std::map<std::string, int64_t>& env) const {
  std::unordered_map<const void*, int64_t> values;
  return evaluate_in(*this, env, values);
}

DimExpr DimExpr::substitute(const std::map<std::string, DimExpr>& env) const {
  return replace_atoms(*this, [&](const Atom& a) -> std::optional<DimExpr> {
    if (a.kind != AtomKind::kVar) return std::nullopt;
    auto it = env.find(a.name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

std::optional<DimExpr::Linear> DimExpr::as_linear_in_one_var() const {
  const auto& t = impl_->terms;
  if (t.empty() || t.size() > 2) return std::nullopt;
  const Term& lead = t[0];
  if (lead.mono.size() != 1 || lead.mono[0].second != 1 || lead.mono[0].first.kind != AtomKind::kVar) {
    return std::nullopt;
  }
  int64_t offset = 0;
  if (t.size() == 2) {
    if (!t[1].mono.empty()) return std::nullopt;
    offset = t[1].coeff;
  }
  return Linear{lead.mono[0].first.name, lead.coeff, offset};
}

size_t DimExpr::hash() const { return impl_->hash; }

DimExpr operator+(const DimExpr& a, const DimExpr& b) {
  if (a.impl_->terms.empty()) return b;
  if (b.impl_->terms.empty()) return a;
  std::vector<Term> t = a.impl_->terms;
  t.insert(t.end(), b.impl_->terms.begin(), b.impl_->terms.end());
  return DimExprOps::make(std::move(t));
}

DimExpr operator-(const DimExpr& a) {
  std::vector<Term> t = a.impl_->terms;
  for (Term& x : t) x.coeff = -x.coeff;
  return DimExprOps::make(std::move(t));
}

DimExpr operator-(const DimExpr& a, const DimExpr& b) { return a + (-b); }

DimExpr operator*(const DimExpr& a, const DimExpr& b) {
  std::vector<Term> t;
  t.reserve(a.impl_->terms.size() * b.impl_->terms.size());
  for (const Term& x : a.impl_->terms) {
    for (const Term& y : b.impl_->terms) t.push_back({multiply_monomials(x.mono, y.mono), x.coeff * y.coeff});
  }
  return DimExprOps::make(std::move(t));
}

bool operator==(const DimExpr& a, const DimExpr& b) {
  if (a.impl_ == b.impl_) return true;
  if (a.impl_->hash != b.impl_->hash) return false;
  return compare_expr(a, b) == 0;
}
bool structurally_less(const DimExpr& a, const DimExpr& b) { return compare_expr(a, b) < 0; }

// ---------------------------------------------------------------------------------------------------
// Non-polynomial operations.

DimExpr floordiv(const DimExpr& a, const DimExpr& b) {
  if (auto k = b.constant_value()) {
    if (*k == 0) return make_op(AtomKind::kFloorDiv, a, b);  // reported when evaluated
    if (*k < 0) return floordiv(-a, DimExpr(-*k));
    if (*k == 1) return a;
    if (auto x = a.constant_value()) return DimExpr(py_floordiv(*x, *k));
    auto [q, r] = split_multiples(a, *k);
    if (auto rc = r.constant_value()) return q + DimExpr(py_floordiv(*rc, *k));
    // (x // k1) // k2 == x // (k1 * k2) for positive k1, k2.
    if (const Atom* inner = as_single_atom(r); inner && inner->kind == AtomKind::kFloorDiv) {
      if (auto k1 = inner->args[1].constant_value(); k1 && *k1 > 0) {
        return q + floordiv(inner->args[0], DimExpr(*k1 * *k));
      }
    }
    return q + make_op(AtomKind::kFloorDiv, r, b);
  }
  if (a.is_constant() && *a.constant_value() == 0) return a;
  if (auto q = exact_quotient(a, b)) return *q;
  return make_op(AtomKind::kFloorDiv, a, b);
}

DimExpr mod(const DimExpr& a, const DimExpr& b) {
  if (auto k = b.constant_value()) {
    if (*k == 0) return make_op(AtomKind::kMod, a, b);
    if (*k < 0) return -mod(-a, DimExpr(-*k));
    if (*k == 1) return DimExpr(0);
    if (auto x = a.constant_value()) return DimExpr(py_mod(*x, *k));
    DimExpr r = split_multiples(a, *k).second;
    if (auto rc = r.constant_value()) return DimExpr(py_mod(*rc, *k));
    return make_op(AtomKind::kMod, r, b);
  }
  if (a.is_constant() && *a.constant_value() == 0) return a;
  if (exact_quotient(a, b)) return DimExpr(0);
  return make_op(AtomKind::kMod, a, b);
}

namespace {
DimExpr max_or_min(const DimExpr& a, const DimExpr& b, bool is_max) {
  auto ca = a.constant_value();
  auto cb = b.constant_value();
  if (ca && cb) return DimExpr(is_max ? std::max(*ca, *cb) : std::min(*ca, *cb));
  if (a == b) return a;
  // Decide from bounds when possible (every variable >= 1): max(b, 1) == b, max(b + 1, b) == b + 1.
  auto [lo, hi] = interval_bounds(a - b);
  if (lo >= 0) return is_max ? a : b;
  if (hi <= 0) return is_max ? b : a;
  const bool swap = structurally_less(b, a);
  return make_op(is_max ? AtomKind::kMax : AtomKind::kMin, swap ? b : a, swap ? a : b);
}
}  // namespace

DimExpr max(const DimExpr& a, const DimExpr& b) { return max_or_min(a, b, true); }
DimExpr min(const DimExpr& a, const DimExpr& b) { return max_or_min(a, b, false); }

// ---------------------------------------------------------------------------------------------------
// Printing.

namespace {
std::string print_expr(const DimExpr& e);

// Operands of "//" and "%" print bare only when they are a non-negative constant, a variable or a
// max/min call; everything else is parenthesised so that the text parses back to the same tree.
std::string print_operand(const DimExpr& e) {
  if (auto c = e.constant_value(); c && *c >= 0) return std::to_string(*c);
  if (const Atom* a = as_single_atom(e);
      a && (a->kind == AtomKind::kVar || a->kind == AtomKind::kMax || a->kind == AtomKind::kMin)) {
    return print_expr(e);
  }
  return "(" + print_expr(e) + ")";
}

std::string print_atom(const Atom& a) {
  switch (a.kind) {
    case AtomKind::kVar: return a.name;
    case AtomKind::kFloorDiv: return print_operand(a.args[0]) + " // " + print_operand(a.args[1]);
    case AtomKind::kMod: return print_operand(a.args[0]) + " % " + print_operand(a.args[1]);
    case AtomKind::kMax: return "max(" + print_expr(a.args[0]) + ", " + print_expr(a.args[1]) + ")";
    case AtomKind::kMin: return "min(" + print_expr(a.args[0]) + ", " + print_expr(a.args[1]) + ")";
  }
  return "?";
}

std::string print_expr(const DimExpr& e) {
  const auto& terms = DimExprOps::terms(e);
  if (terms.empty()) return "0";
  std::string out;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const int64_t mag = t.coeff < 0 ? -t.coeff : t.coeff;
    if (i == 0) {
      if (t.coeff < 0) out += "-";
    } else {
      out += t.coeff < 0 ? " - " : " + ";
    }
    if (t.mono.empty()) {
      out += std::to_string(mag);
      continue;
    }
    // "//" and "%" bind like "*" and unary minus binds tighter, so they need parentheses unless the
    // term is exactly the atom (possibly after a binary " - ").
    const bool bare_ok = t.mono.size() == 1 && t.mono[0].second == 1 && mag == 1 && !(i == 0 && t.coeff < 0);
    bool first = true;
    if (mag != 1) {
      out += std::to_string(mag);
      first = false;
    }
    for (const auto& [atom, pow] : t.mono) {
      if (!first) out += "*";
      first = false;
      std::string s = print_atom(atom);
      if ((atom.kind == AtomKind::kFloorDiv || atom.kind == AtomKind::kMod) && !bare_ok) s = "(" + s + ")";
      out += s;
      if (pow > 1) absl::StrAppend(&out, "^", pow);
    }
  }
  return out;
}
}  // namespace

std::string DimExpr::to_string() const { return print_expr(*this); }

// ---------------------------------------------------------------------------------------------------
// Parsing: expr := term (("+" | "-") term)*;  term := unary (("*" | "//" | "%") unary)*;
// unary := ("-" | "+") unary | power;  power := primary (("^" | "**") integer)?;
// primary := integer | identifier | ("max" | "min" | "floordiv" | "mod") "(" expr "," expr ")" | "(" expr ")".

namespace {
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<DimExpr> parse_all() {
    auto e = parse_sum();
    if (!e.ok()) return e;
    skip_space();
    if (pos_ != text_.size()) return error("unexpected '" + std::string(1, text_[pos_]) + "'");
    return e;
  }

 private:
  absl::Status error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("[DimExpr::parse] ", what, " at position ", pos_,
                                                   " in '", std::string(text_), "'"));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(std::string_view tok) {
    skip_space();
    if (text_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  bool peek(std::string_view tok) {
    skip_space();
    return text_.substr(pos_, tok.size()) == tok;
  }

  absl::StatusOr<DimExpr> parse_sum() {
    MCX_ASSIGN_OR_RETURN(DimExpr acc, parse_term());
    while (true) {
      if (accept("+")) {
        MCX_ASSIGN_OR_RETURN(DimExpr r, parse_term());
        acc = acc + r;
      } else if (accept("-")) {
        MCX_ASSIGN_OR_RETURN(DimExpr r, parse_term());
        acc = acc - r;
      } else {
        return acc;
      }
    }
  }

  absl::StatusOr<DimExpr> parse_term() {
    MCX_ASSIGN_OR_RETURN(DimExpr acc, parse_unary());
    while (true) {
      if (accept("//")) {
        MCX_ASSIGN_OR_RETURN(DimExpr r, parse_unary());
        acc = floordiv(acc, r);
      } else if (peek("**")) {
        return error("unexpected '**' (exponents bind to a single factor, e.g. 'b^2')");
      } else if (accept("*")) {
        MCX_ASSIGN_OR_RETURN(DimExpr r, parse_unary());
        acc = acc * r;
      } else if (accept("%")) {
        MCX_ASSIGN_OR_RETURN(DimExpr r, parse_unary());
        acc = mod(acc, r);
      } else if (peek("/")) {
        return error("unexpected '/' (use '//' for floor division)");
      } else {
        return acc;
      }
    }
  }

  absl::StatusOr<DimExpr> parse_unary() {
    if (accept("-")) {
      MCX_ASSIGN_OR_RETURN(DimExpr e, parse_unary());
      return -e;
    }
    if (accept("+")) return parse_unary();  // a leading sign, as JAX takes: "+ a - b"
    MCX_ASSIGN_OR_RETURN(DimExpr base, parse_primary());
    if (accept("^") || accept("**")) {
      skip_space();
      size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      int n = 0;
      if (start == pos_ || !absl::SimpleAtoi(absl::string_view(text_.data() + start, pos_ - start), &n) || n > 64) {
        pos_ = start;
        return error("expected a small non-negative integer exponent");
      }
      return power(base, n);
    }
    return base;
  }

  absl::StatusOr<DimExpr> parse_primary() {
    skip_space();
    if (pos_ >= text_.size()) return error("unexpected end of expression");
    const char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      int64_t v;
      if (!absl::SimpleAtoi(absl::string_view(text_.data() + start, pos_ - start), &v)) {
        pos_ = start;
        return error("integer literal out of range");
      }
      return DimExpr(v);
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      std::string_view name = text_.substr(start, pos_ - start);
      if (peek("(")) {
        if (name != "max" && name != "min" && name != "floordiv" && name != "mod") {
          pos_ = start;
          return error("unknown function '" + std::string(name) + "' (expected max, min, floordiv or mod)");
        }
        accept("(");
        MCX_ASSIGN_OR_RETURN(DimExpr a, parse_sum());
        if (!accept(",")) return error("expected ','");
        MCX_ASSIGN_OR_RETURN(DimExpr b, parse_sum());
        if (!accept(")")) return error("expected ')'");
        if (name == "max") return max(a, b);
        if (name == "min") return min(a, b);
        if (name == "floordiv") return floordiv(a, b);
        return mod(a, b);
      }
      if (name == "_") {
        pos_ = start;
        return error("'_' is not a dimension variable (in a shape specification it takes the dimension from an "
                     "example: symbolic_args_specs)");
      }
      return DimExpr::var(name);
    }
    if (accept("(")) {
      MCX_ASSIGN_OR_RETURN(DimExpr e, parse_sum());
      if (!accept(")")) return error("expected ')'");
      return e;
    }
    return error("unexpected '" + std::string(1, c) + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
};
}  // namespace

absl::StatusOr<DimExpr> DimExpr::parse(std::string_view text) { return Parser(text).parse_all(); }

}  // namespace mcx
