// SymbolicScope: constraints over dimension variables, bounds by interval arithmetic, and decided
// comparisons (the model is JAX's shape_poly `_bounds_decision`, written independently).
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/dim_elimination.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/dim_expr_internal.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();

struct Interval {
  int64_t lo = kNegInf;
  int64_t hi = kPosInf;
};

int64_t clamp128(__int128 v) {
  if (v >= static_cast<__int128>(kPosInf)) return kPosInf;
  if (v <= static_cast<__int128>(kNegInf)) return kNegInf;
  return static_cast<int64_t>(v);
}

// Saturating arithmetic where kPosInf / kNegInf stand for +-infinity.
int64_t add_sat(int64_t a, int64_t b) {
  if (a == kPosInf || b == kPosInf) return kPosInf;
  if (a == kNegInf || b == kNegInf) return kNegInf;
  return clamp128(static_cast<__int128>(a) + b);
}
int64_t mul_sat(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  const bool neg = (a < 0) != (b < 0);
  if (a == kPosInf || a == kNegInf || b == kPosInf || b == kNegInf) return neg ? kNegInf : kPosInf;
  return clamp128(static_cast<__int128>(a) * b);
}
// Floor division of a bound by a positive finite k.
int64_t floordiv_sat(int64_t a, int64_t k) {
  if (a == kPosInf || a == kNegInf) return a;
  int64_t q = a / k;
  if (a % k != 0 && a < 0) --q;
  return q;
}

Interval mul(Interval a, Interval b) {
  const int64_t c[4] = {mul_sat(a.lo, b.lo), mul_sat(a.lo, b.hi), mul_sat(a.hi, b.lo), mul_sat(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

int64_t negate(int64_t v) {
  if (v == kNegInf) return kPosInf;
  if (v == kPosInf) return kNegInf;
  return -v;
}

Interval intersect(Interval a, Interval b) { return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)}; }

// What one query has learnt: the bounds of operation atoms (structurally keyed: operands are shared, so
// without it nested max/min/floordiv would be re-bounded exponentially often, and atoms rebuilt by the
// reasoning must be recognised), and how deep the linear reasoning has nested (bounding an atom's operands
// reasons about them in turn).
struct Cache {
  std::unordered_map<DimExpr, Interval> atoms;
  std::unordered_map<DimExpr, DimExpr> simplified;  // max/min atoms and what simplify_decided made of them
  int depth = 0;
};
constexpr int kMaxReasoningDepth = 2;  // the query and its atoms' operands; deeper: interval arithmetic

std::string bound_str(int64_t v) {
  if (v == kPosInf) return "inf";
  if (v == kNegInf) return "-inf";
  return std::to_string(v);
}

}  // namespace

namespace {

// The monomials of dimension expressions as the variables of a linear system (dim_elimination.h): a
// polynomial is a linear form over its monomials. Rows are added as "p >= 0".
class MonomialSystem {
 public:
  static constexpr int kMaxVars = 16;  // beyond this no more defining rows are added (the system stays small)

  int var(const Monomial& m) {
    const DimExpr key = DimExprOps::make({Term{m, 1}});
    auto [it, inserted] = index_.emplace(key, static_cast<int>(vars_.size()));
    if (inserted) vars_.push_back(m);
    return it->second;
  }
  // Adds p >= 0, unless p would bring the system past kMaxVars variables: then the row is left out (a system
  // with fewer rows implies less, never something false).
  void add(const DimExpr& p) {
    Pending row;
    for (const Term& t : DimExprOps::terms(p)) {
      if (t.mono.empty()) {
        row.constant = t.coeff;
        continue;
      }
      if (static_cast<int>(vars_.size()) >= kMaxVars && !index_.count(DimExprOps::make({Term{t.mono, 1}}))) return;
      row.coeffs.emplace_back(var(t.mono), t.coeff);
    }
    rows_.push_back(std::move(row));
  }
  const std::vector<Monomial>& vars() const { return vars_; }
  int size() const { return static_cast<int>(vars_.size()); }

  std::vector<LinearRow> rows() const {
    std::vector<LinearRow> out;
    for (const Pending& p : rows_) {
      LinearRow r{std::vector<int64_t>(vars_.size(), 0), p.constant};
      for (const auto& [v, c] : p.coeffs) r.coeffs[static_cast<size_t>(v)] += c;
      out.push_back(std::move(r));
    }
    return out;
  }

 private:
  struct Pending {
    std::vector<std::pair<int, int64_t>> coeffs;
    int64_t constant = 0;
  };
  std::map<DimExpr, int, DimExprLess> index_;
  std::vector<Monomial> vars_;
  std::vector<Pending> rows_;
};

}  // namespace

struct SymbolicScope::State {
  // Variables declared "zero_sized(v)": they may be 0 (every other variable is at least 1).
  std::set<std::string> zero_allowed;
  // "==" constraints used as rewrites (JAX's normalisation rules). An atom rule replaces an atom
  // everywhere (also inside products, powers and operands); a term rule replaces a term c*m with
  // (c / k) * rhs when k divides c.
  std::vector<std::pair<Atom, DimExpr>> atom_rules;
  struct TermRule {
    Monomial mono;
    int64_t k;
    DimExpr rhs;
  };
  std::vector<TermRule> term_rules;
  std::vector<DimExpr> nonneg;                         // every constraint as "p >= 0", rewrites applied
  std::vector<std::pair<Atom, Interval>> atom_bounds;  // from constraints linear in one atom

  DimExpr rewrite_once(const DimExpr& e) const {
    DimExpr out = e;
    if (!atom_rules.empty()) {
      out = replace_atoms(out, [&](const Atom& a) -> std::optional<DimExpr> {
        for (const auto& [from, to] : atom_rules) {
          if (compare_atom(a, from) == 0) return to;
        }
        return std::nullopt;
      });
    }
    if (!term_rules.empty()) {
      DimExpr sum;
      for (const Term& t : DimExprOps::terms(out)) {
        DimExpr term = DimExprOps::make({t});
        for (const TermRule& r : term_rules) {
          if (t.coeff % r.k != 0) continue;
          // Also inside products: 4*c*(b // 4) is c*b under mod(b, 4) == 0.
          std::optional<Monomial> rest = divide_monomial(t.mono, r.mono);
          if (!rest) continue;
          term = DimExpr(t.coeff / r.k) * r.rhs * DimExprOps::make({Term{*rest, 1}});
          break;
        }
        sum = sum + term;
      }
      out = sum;
    }
    return out;
  }

  DimExpr rewrite(const DimExpr& e) const {
    if (atom_rules.empty() && term_rules.empty()) return e;
    DimExpr cur = e;
    for (int round = 0; round < 8; ++round) {
      DimExpr next = rewrite_once(cur);
      if (next == cur) break;
      cur = next;
    }
    return cur;
  }

  Interval atom_interval(const Atom& a, Cache& cache) const {
    std::optional<DimExpr> key;
    if (a.kind != AtomKind::kVar) {
      key = DimExprOps::from_atom(a);
      if (auto it = cache.atoms.find(*key); it != cache.atoms.end()) return it->second;
      // Unbounded while it is being computed: bounding its operands may meet it again (through a constraint
      // that mentions it), and must then not recurse.
      cache.atoms.emplace(*key, Interval{});
    }
    Interval iv = intrinsic(a, cache);
    for (const auto& [atom, b] : atom_bounds) {
      if (compare_atom(atom, a) == 0) iv = intersect(iv, b);
    }
    if (key) cache.atoms[*key] = iv;
    return iv;
  }

  Interval monomial_interval(const Monomial& m, Cache& cache) const {
    Interval prod{1, 1};
    for (const auto& [atom, pow] : m) {
      const Interval a = atom_interval(atom, cache);
      if (a.lo > a.hi) return a;  // empty: the constraints contradict each other (create() refuses them)
      for (int i = 0; i < pow; ++i) prod = mul(prod, a);
    }
    return prod;
  }

  // Lower bound of a sum of terms. Plain interval arithmetic loses the correlation in b*c - c, so a
  // negative term -k*m is first paired with a positive term k*m*q (q >= 1, m >= 0): their sum
  // k*m*(q - 1) is at least k*lo(m)*(lo(q) - 1) >= 0.
  int64_t lower(std::vector<Term> terms, Cache& cache) const {
    int64_t lo = 0;
    for (Term& n : terms) {
      if (n.coeff >= 0 || n.mono.empty()) continue;
      const Interval mn = monomial_interval(n.mono, cache);
      if (mn.lo < 0) continue;
      for (Term& p : terms) {
        if (p.coeff <= 0 || n.coeff >= 0) continue;
        std::optional<Monomial> q = divide_monomial(p.mono, n.mono);
        if (!q || q->empty()) continue;
        const Interval qi = monomial_interval(*q, cache);
        if (qi.lo < 1) continue;
        const int64_t k = std::min(p.coeff, -n.coeff);
        p.coeff -= k;
        n.coeff += k;
        lo = add_sat(lo, mul_sat(k, mul_sat(mn.lo, qi.lo - 1)));
      }
    }
    for (const Term& t : terms) {
      if (t.coeff == 0) continue;
      const Interval m = mul({t.coeff, t.coeff}, monomial_interval(t.mono, cache));
      lo = add_sat(lo, m.lo);
    }
    return lo;
  }

  // Interval arithmetic over the polynomial (with the pairing above), without the constraint trick.
  Interval interval(const DimExpr& e, Cache& cache) const {
    std::vector<Term> neg = DimExprOps::terms(e);
    for (Term& t : neg) t.coeff = -t.coeff;
    return {lower(DimExprOps::terms(e), cache), negate(lower(std::move(neg), cache))};
  }

  // Interval arithmetic improved by the constraints: with p >= 0 and f > 0, e >= lo(e - f*p) and
  // e <= hi(e + f*p); f is chosen so that a term of p cancels a term of e.
  Interval bounds(const DimExpr& e, Cache& cache) const {
    Interval iv = interval(e, cache);
    for (const DimExpr& p : nonneg) {
      for (const Term& tp : DimExprOps::terms(p)) {
        if (tp.mono.empty()) continue;
        for (const Term& te : DimExprOps::terms(e)) {
          if (compare_monomial(te.mono, tp.mono) != 0 || te.coeff % tp.coeff != 0) continue;
          const int64_t f = te.coeff / tp.coeff;
          if (f > 0) iv.lo = std::max(iv.lo, interval(e - DimExpr(f) * p, cache).lo);
          if (f < 0) iv.hi = std::min(iv.hi, interval(e + DimExpr(-f) * p, cache).hi);
        }
      }
    }
    return iv;
  }

  // Adds, for every variable of sys (which grows as rows bring in new monomials), its interval bounds and,
  // for an operation atom, the inequalities that define it: max(x, y) >= x and >= y; min(x, y) <= x and <= y;
  // k*(x // k) <= x <= k*(x // k) + k - 1 (k > 0; mirrored for k < 0); x % k == x - k*(x // k); and
  // 0 <= x % y <= y - 1 for a divisor y >= 1.
  void add_defining_rows(MonomialSystem& sys, Cache& cache) const {
    for (int i = 0; i < sys.size(); ++i) {
      const Monomial m = sys.vars()[static_cast<size_t>(i)];  // a copy: sys.vars() grows below
      const DimExpr v = DimExprOps::make({Term{m, 1}});
      const Interval iv = monomial_interval(m, cache);
      if (iv.lo != kNegInf) sys.add(v - DimExpr(iv.lo));
      if (iv.hi != kPosInf) sys.add(DimExpr(iv.hi) - v);
      if (m.size() != 1 || m[0].second != 1 || m[0].first.kind == AtomKind::kVar) continue;
      const Atom& a = m[0].first;
      const DimExpr& x = a.args[0];
      const DimExpr& y = a.args[1];
      const std::optional<int64_t> k = y.constant_value();
      switch (a.kind) {
        case AtomKind::kMax:
        case AtomKind::kMin: {
          const bool is_max = a.kind == AtomKind::kMax;
          sys.add(is_max ? v - x : x - v);
          sys.add(is_max ? v - y : y - v);
          // When the operands' order is decided the atom is one of them: max(a, 2) is a under a >= 4.
          const Interval d = bounds(x - y, cache);
          if (d.lo >= 0) sys.add(is_max ? x - v : v - y);
          if (d.hi <= 0) sys.add(is_max ? y - v : v - x);
          break;
        }
        case AtomKind::kFloorDiv:
          if (k && *k > 0) {
            sys.add(x - y * v);
            sys.add(y * v + y - DimExpr(1) - x);
          } else if (k && *k < 0) {
            sys.add(y * v - x);
            sys.add(x - y * v - y - DimExpr(1));
          }
          break;
        case AtomKind::kMod:
          if (k && *k != 0) {
            const DimExpr q = floordiv(x, y);
            sys.add(v - x + y * q);
            sys.add(x - y * q - v);
          } else if (!k && bounds(y, cache).lo >= 1) {
            sys.add(v);
            sys.add(y - DimExpr(1) - v);
          }
          break;
        case AtomKind::kVar: break;
      }
    }
  }

  // bounds() narrowed by linear reasoning over the constraints and the operations' defining rows
  // (dim_elimination.h): what chains and combinations of constraints decide. Run only when interval
  // arithmetic leaves a range and there is something to reason with (constraints or operation atoms).
  Interval refined_bounds(const DimExpr& e, Cache& cache) const {
    const Interval iv = bounds(e, cache);
    if (iv.lo == iv.hi) return iv;
    const bool has_operations = any_atom(e, [](const Atom& a) { return a.kind != AtomKind::kVar; });
    if ((nonneg.empty() && !has_operations) || cache.depth >= kMaxReasoningDepth) return iv;
    ++cache.depth;
    const DimExpr simplified = cache.depth == 1 ? simplify_decided(e, cache) : e;  // the query itself only
    const std::optional<Interval> split = split_bounds(simplified, {}, 0, cache);
    --cache.depth;
    return split ? intersect(iv, *split) : iv;  // nullopt: no solutions; create() refuses such constraints
  }

  // e with every max/min whose operands' order is decided replaced by the operand it equals.
  DimExpr simplify_decided(const DimExpr& e, Cache& cache) const {
    if (!any_atom(e, [](const Atom& a) { return a.kind == AtomKind::kMax || a.kind == AtomKind::kMin; })) return e;
    return replace_atoms(e, [&](const Atom& a) -> std::optional<DimExpr> {
      if (a.kind != AtomKind::kMax && a.kind != AtomKind::kMin) return std::nullopt;
      const DimExpr whole = DimExprOps::from_atom(a);
      if (auto it = cache.simplified.find(whole); it != cache.simplified.end()) return it->second;
      const DimExpr x = simplify_decided(a.args[0], cache), y = simplify_decided(a.args[1], cache);
      const Interval d = refined_bounds(x - y, cache);
      const bool is_max = a.kind == AtomKind::kMax;
      DimExpr out = is_max ? max(x, y) : min(x, y);
      if (d.lo >= 0) out = is_max ? x : y;
      if (d.hi <= 0) out = is_max ? y : x;
      cache.simplified.emplace(whole, out);
      return out;
    });
  }

  // The bounds of e by cases: a max or min that occurs as a term of e is, in each case, one of its operands
  // (max(x, y) is x where x >= y, else y), so c*max(x, y) + rest lies in the hull of c*x + rest under x >= y
  // and c*y + rest under y >= x; a case whose rows cannot hold drops out. Up to kMaxSplits nested cases, then
  // elimination (linear_bounds). nullopt when no case can hold.
  static constexpr int kMaxSplits = 3;
  std::optional<Interval> split_bounds(const DimExpr& e, std::vector<DimExpr> extra, int depth, Cache& cache) const {
    if (depth < kMaxSplits) {
      for (const Term& t : DimExprOps::terms(e)) {
        const Atom* atom = t.mono.size() == 1 && t.mono[0].second == 1 ? &t.mono[0].first : nullptr;
        if (atom == nullptr || (atom->kind != AtomKind::kMax && atom->kind != AtomKind::kMin)) continue;
        const bool is_max = atom->kind == AtomKind::kMax;
        const DimExpr whole = DimExpr(t.coeff) * DimExprOps::from_atom(*atom);
        std::optional<Interval> hull;
        for (int side = 0; side < 2; ++side) {
          const DimExpr& pick = atom->args[side];
          const DimExpr& other = atom->args[1 - side];
          std::vector<DimExpr> rows = extra;
          rows.push_back(is_max ? pick - other : other - pick);  // the case: pick is the max (min)
          std::optional<Interval> b = split_bounds(e - whole + DimExpr(t.coeff) * pick, std::move(rows), depth + 1, cache);
          if (!b) continue;
          hull = hull ? Interval{std::min(hull->lo, b->lo), std::max(hull->hi, b->hi)} : *b;
        }
        return hull;
      }
    }
    return linear_bounds(e, extra, cache);
  }

  // Bounds of e over the integer solutions of the constraints, the extra rows (each >= 0), and the defining
  // rows of every monomial involved, by elimination; nullopt when they have none.
  std::optional<Interval> linear_bounds(const DimExpr& e, const std::vector<DimExpr>& extra, Cache& cache) const {
    MonomialSystem sys;
    for (const Term& t : DimExprOps::terms(e)) {
      if (!t.mono.empty()) sys.var(t.mono);
    }
    for (const DimExpr& p : extra) sys.add(p);
    for (const DimExpr& p : nonneg) sys.add(p);
    add_defining_rows(sys, cache);
    // The query z == e as two rows over one more variable, z (the last).
    const int n = sys.size();
    std::vector<LinearRow> rows = sys.rows();
    for (LinearRow& r : rows) r.coeffs.push_back(0);
    LinearRow upper{std::vector<int64_t>(static_cast<size_t>(n) + 1, 0), 0};  // e - z >= 0
    for (const Term& t : DimExprOps::terms(e)) {
      if (t.mono.empty()) {
        upper.constant = t.coeff;
      } else {
        upper.coeffs[static_cast<size_t>(sys.var(t.mono))] = t.coeff;
      }
    }
    upper.coeffs[static_cast<size_t>(n)] = -1;
    LinearRow lower = upper;  // z - e >= 0
    for (int64_t& c : lower.coeffs) c = -c;
    lower.constant = -lower.constant;
    rows.push_back(std::move(upper));
    rows.push_back(std::move(lower));
    const EliminationBounds b = eliminate_for_bounds(rows, n + 1, n);
    if (b.infeasible) return std::nullopt;
    return intersect(interval(e, cache), {b.lo, b.hi});
  }

  // Whether the constraints (with every variable >= 1) are satisfiable as far as elimination can tell.
  bool satisfiable(Cache& cache) const {
    MonomialSystem sys;
    for (const DimExpr& p : nonneg) sys.add(p);
    add_defining_rows(sys, cache);
    return !eliminate_for_bounds(sys.rows(), sys.size(), -1).infeasible;
  }

  Interval intrinsic(const Atom& a, Cache& cache) const {
    if (a.kind == AtomKind::kVar) return {zero_allowed.count(a.name) ? 0 : 1, kPosInf};
    const Interval x = refined_bounds(a.args[0], cache);
    const Interval y = refined_bounds(a.args[1], cache);
    switch (a.kind) {
      case AtomKind::kMax: return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
      case AtomKind::kMin: return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
      case AtomKind::kFloorDiv:
        if (y.lo >= 1 && y.lo == y.hi) return {floordiv_sat(x.lo, y.lo), floordiv_sat(x.hi, y.lo)};
        if (y.lo >= 1) {
          // floor(x / y) for y in [y.lo, y.hi]: extremes at the ends of both ranges.
          // A negative dividend is most negative over the smallest divisor: -11 // (a + 1) >= -11 // 2.
          const int64_t lo = x.lo >= 0 ? (y.hi == kPosInf ? 0 : floordiv_sat(x.lo, y.hi)) : floordiv_sat(x.lo, y.lo);
          const int64_t hi = x.hi >= 0 ? floordiv_sat(x.hi, y.lo) : -1;
          return {lo, hi};
        }
        return {};
      case AtomKind::kMod:
        if (y.lo >= 1) {
          Interval r{0, y.hi == kPosInf ? kPosInf : y.hi - 1};
          if (x.lo >= 0) r.hi = std::min(r.hi, x.hi);
          if (x.lo >= 0 && x.hi < y.lo) r.lo = x.lo;
          return r;
        }
        return {};
      case AtomKind::kVar: break;
    }
    return {};
  }
};

namespace {

// Finds the comparison operator outside parentheses; exactly one is allowed.
absl::StatusOr<SymbolicScope::Constraint> parse_constraint(std::string_view text) {
  auto malformed = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[SymbolicScope] malformed constraint '", std::string(text), "': ", std::string(why),
        "; expected '<lhs> <op> <rhs>' with op one of >=, <=, >, <, =="));
  };
  int depth = 0;
  size_t op_pos = std::string_view::npos;
  std::string op;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth != 0 || (c != '<' && c != '>' && c != '=')) continue;
    if (op_pos != std::string_view::npos) return malformed("more than one comparison");
    op_pos = i;
    op = std::string(1, c);
    if (i + 1 < text.size() && text[i + 1] == '=') {
      op += '=';
      ++i;
    }
    if (op == "=") return malformed("'=' is not a comparison (use '==')");
  }
  if (op_pos == std::string_view::npos) return malformed("no comparison operator");
  auto lhs = DimExpr::parse(strip_space(text.substr(0, op_pos)));
  if (!lhs.ok()) return malformed(std::string(lhs.status().message()));
  auto rhs = DimExpr::parse(strip_space(text.substr(op_pos + op.size())));
  if (!rhs.ok()) return malformed(std::string(rhs.status().message()));
  return SymbolicScope::Constraint{*std::move(lhs), op, *std::move(rhs)};
}

// The variable of a "zero_sized(v)" declaration, or nullopt for any other text.
std::optional<std::string> zero_sized_variable(std::string_view text) {
  const std::string_view t = strip_space(text);
  constexpr std::string_view kPrefix = "zero_sized(";
  if (!t.starts_with(kPrefix) || !t.ends_with(")")) return std::nullopt;
  absl::StatusOr<DimExpr> e = DimExpr::parse(t.substr(kPrefix.size(), t.size() - kPrefix.size() - 1));
  const Atom* a = e.ok() ? as_single_atom(*e) : nullptr;
  if (a == nullptr || a->kind != AtomKind::kVar) return std::nullopt;
  return a->name;
}

bool contains_atom(const DimExpr& e, const Atom& a) {
  return any_atom(e, [&](const Atom& x) { return compare_atom(x, a) == 0; });
}

}  // namespace

// Turns "lhs == rhs" into a rewrite when one side is a single term (lhs preferred, as in JAX).
absl::Status SymbolicScope::add_equality_rules(const Constraint& c, const std::string& text, State* state) {
  const auto single_term = [](const DimExpr& e) {
    const auto& t = DimExprOps::terms(e);
    return t.size() == 1 && !t[0].mono.empty();
  };
  const bool use_lhs = single_term(c.lhs);
  if (!use_lhs && !single_term(c.rhs)) return absl::OkStatus();  // kept as two inequalities only
  const DimExpr& from = use_lhs ? c.lhs : c.rhs;
  const DimExpr& to = use_lhs ? c.rhs : c.lhs;
  const Term& t = DimExprOps::terms(from)[0];
  auto duplicate = [&]() {
    return absl::InvalidArgumentError(absl::StrCat("[SymbolicScope] constraint '", text, "' gives a second rewrite for '",
                                                   from.to_string(), "'; use one equality per term"));
  };
  const Atom* atom = as_single_atom(from);
  if (atom && !contains_atom(to, *atom)) {
    for (const auto& [a, unused] : state->atom_rules) {
      if (compare_atom(a, *atom) == 0) return duplicate();
    }
    state->atom_rules.emplace_back(*atom, to);
    // mod(e, k) == 0 also means k * floordiv(e, k) == e.
    if (atom->kind == AtomKind::kMod && to.constant_value() == 0) {
      const DimExpr fd = floordiv(atom->args[0], atom->args[1]);
      auto k = atom->args[1].constant_value();
      if (k && *k > 0 && as_single_atom(fd)) {
        state->term_rules.push_back({DimExprOps::terms(fd)[0].mono, *k, atom->args[0]});
      }
    }
    return absl::OkStatus();
  }
  for (const auto& r : state->term_rules) {
    if (compare_monomial(r.mono, t.mono) == 0) return duplicate();
  }
  state->term_rules.push_back({t.mono, t.coeff, to});
  return absl::OkStatus();
}

absl::StatusOr<SymbolicScope> SymbolicScope::create(const std::vector<std::string>& constraints) {
  SymbolicScope scope;
  scope.constraints_text_ = constraints;
  auto state = std::make_shared<State>();
  for (const std::string& text : constraints) {
    // "zero_sized(v)": v may be 0, a dimension of size 0 (it stands as "v >= 0" among the constraints). Not a
    // comparison, so that JAX's "v >= 0", which leaves v >= 1, keeps its meaning.
    if (std::optional<std::string> v = zero_sized_variable(text)) {
      state->zero_allowed.insert(*v);
      scope.parsed_.push_back(Constraint{DimExpr::var(*v), ">=", DimExpr(0)});
      continue;
    }
    MCX_ASSIGN_OR_RETURN(Constraint c, parse_constraint(text));
    if (c.op == "==") MCX_RETURN_IF_ERROR(add_equality_rules(c, text, state.get()));
    scope.parsed_.push_back(std::move(c));
  }
  for (size_t i = 0; i < scope.parsed_.size(); ++i) {
    const Constraint& c = scope.parsed_[i];
    const DimExpr l = state->rewrite(c.lhs);
    const DimExpr r = state->rewrite(c.rhs);
    std::vector<DimExpr> ps;
    if (c.op == ">=") ps = {l - r};
    if (c.op == ">") ps = {l - r - DimExpr(1)};
    if (c.op == "<=") ps = {r - l};
    if (c.op == "<") ps = {r - l - DimExpr(1)};
    if (c.op == "==") {
      ps = {l - r, r - l};
      // The equality as written too: rewriting may reduce it to 0 == 0 (4*d == a - m rewrites 4*d away), and
      // elimination still needs what it says about the rest (a - 2*d = m + 2*d >= 3).
      if (l != c.lhs || r != c.rhs) {
        ps.push_back(c.lhs - c.rhs);
        ps.push_back(c.rhs - c.lhs);
      }
    }
    for (DimExpr& p : ps) {
      if (auto v = p.constant_value()) {
        if (*v < 0) {
          return absl::InvalidArgumentError(absl::StrCat("[SymbolicScope] constraint '", constraints[i],
                                                         "' can never hold (it reduces to ", v.value(),
                                                         " >= 0)"));
        }
        continue;
      }
      state->nonneg.push_back(std::move(p));
    }
  }
  // Bounds of single atoms from constraints linear in them (k*atom + rest >= 0), iterated so that
  // chains such as "a >= 2*b", "b >= 8" propagate.
  for (int round = 0; round < 4; ++round) {
    bool changed = false;
    for (const DimExpr& p : state->nonneg) {
      for (const Term& t : DimExprOps::terms(p)) {
        if (t.mono.size() != 1 || t.mono[0].second != 1) continue;
        const Atom& atom = t.mono[0].first;
        const DimExpr rest = p - DimExpr(t.coeff) * DimExprOps::from_atom(atom);
        Cache cache;
        const int64_t rest_hi = state->interval(rest, cache).hi;
        if (rest_hi == kPosInf) continue;
        Interval b;
        if (t.coeff > 0) {  // atom >= ceil(-rest_hi / k)
          b.lo = -floordiv_sat(rest_hi, t.coeff);
        } else {            // atom <= floor(rest_hi / -k)
          b.hi = floordiv_sat(rest_hi, -t.coeff);
        }
        const Interval before = state->atom_interval(atom, cache);
        const Interval after = intersect(before, b);
        if (after.lo != before.lo || after.hi != before.hi) {
          state->atom_bounds.emplace_back(atom, b);
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  Cache cache;
  if (!state->satisfiable(cache)) {
    if (constraints.size() > 1) {
      for (const std::string& text : constraints) {  // name the one that cannot hold on its own, if any
        MCX_RETURN_IF_ERROR(SymbolicScope::create({text}).status());
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "[SymbolicScope] unsatisfiable constraints {", absl::StrJoin(constraints, ", "),
        "}: no values of the dimension variables (each >= 1, or >= 0 where declared zero_sized) satisfy them all"));
  }
  scope.state_ = std::move(state);
  return scope;
}

std::pair<int64_t, int64_t> SymbolicScope::bounds(const DimExpr& e) const {
  static const State* empty = new State();
  const State& s = state_ ? *state_ : *empty;
  Cache cache;
  const Interval iv = s.refined_bounds(s.rewrite(e), cache);
  return {iv.lo, iv.hi};
}

const SymbolicScope::State*& SymbolicScope::zero_sized_state() {
  thread_local const State* state = nullptr;
  return state;
}

std::pair<int64_t, int64_t> interval_bounds(const DimExpr& e) {
  static const SymbolicScope::State* empty = new SymbolicScope::State();
  Cache cache;
  cache.depth = kMaxReasoningDepth;  // no linear reasoning, no cases
  const SymbolicScope::State* zero = SymbolicScope::zero_sized_state();
  const Interval iv = (zero != nullptr ? zero : empty)->bounds(e, cache);
  return {iv.lo, iv.hi};
}

const std::set<std::string>& SymbolicScope::zero_allowed() const {
  static const std::set<std::string>* none = new std::set<std::string>();
  return state_ ? state_->zero_allowed : *none;
}

ZeroSizedVariables::ZeroSizedVariables(const SymbolicScope& scope) : previous_(SymbolicScope::zero_sized_state()) {
  if (scope.zero_allowed().empty()) return;
  auto state = std::make_shared<SymbolicScope::State>();  // made once here, not at every expression built
  state->zero_allowed = scope.zero_allowed();
  state_ = std::move(state);
  SymbolicScope::zero_sized_state() = state_.get();
}

ZeroSizedVariables::~ZeroSizedVariables() { SymbolicScope::zero_sized_state() = previous_; }

namespace {
absl::Status inconclusive(const DimExpr& a, std::string_view op, const DimExpr& b, const DimExpr& diff,
                          std::pair<int64_t, int64_t> range, const std::vector<std::string>& constraints) {
  return absl::InvalidArgumentError(absl::StrCat(
      "inconclusive dimension comparison: ", a.to_string(), " ", std::string(op), " ", b.to_string(), " (the difference ",
      diff.to_string(), " lies in [", bound_str(range.first), ", ", bound_str(range.second),
      "] given dimension variables >= 1",
      constraints.empty() ? std::string(" and no constraints")
                          : absl::StrCat(" and constraints {", absl::StrJoin(constraints, ", "), "}"),
      "); a constraint such as '", a.to_string(), " ", std::string(op), " ", b.to_string(),
      "' in the symbolic scope would decide it"));
}
}  // namespace

absl::StatusOr<bool> SymbolicScope::ge(const DimExpr& a, const DimExpr& b) const {
  const DimExpr d = a - b;
  const auto range = bounds(d);
  if (range.first >= 0) return true;
  if (range.second < 0) return false;
  return inconclusive(a, ">=", b, d, range, constraints_text_);
}

absl::StatusOr<bool> SymbolicScope::gt(const DimExpr& a, const DimExpr& b) const {
  const DimExpr d = a - b;
  const auto range = bounds(d);
  if (range.first >= 1) return true;
  if (range.second <= 0) return false;
  return inconclusive(a, ">", b, d, range, constraints_text_);
}

bool SymbolicScope::known_equal(const DimExpr& a, const DimExpr& b) const {
  if (a == b) return true;
  if (state_ && state_->rewrite(a) == state_->rewrite(b)) return true;
  const auto range = bounds(a - b);
  return range.first == 0 && range.second == 0;
}

absl::Status SymbolicScope::check(const std::map<std::string, int64_t>& env) const {
  auto env_str = [&]() {
    std::vector<std::string> parts;
    for (const auto& [k, v] : env) parts.push_back(absl::StrCat(k, " = ", v));
    return absl::StrJoin(parts, ", ");
  };
  for (size_t i = 0; i < parsed_.size(); ++i) {
    const Constraint& c = parsed_[i];
    auto l = c.lhs.evaluate(env);
    auto r = c.rhs.evaluate(env);
    if (!l.ok() || !r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[SymbolicScope::check] cannot evaluate constraint '", constraints_text_[i], "' for {", env_str(),
          "}: ", (!l.ok() ? l.status() : r.status()).message()));
    }
    bool ok = false;
    if (c.op == ">=") ok = *l >= *r;
    if (c.op == ">") ok = *l > *r;
    if (c.op == "<=") ok = *l <= *r;
    if (c.op == "<") ok = *l < *r;
    if (c.op == "==") ok = *l == *r;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("[SymbolicScope::check] constraint '", constraints_text_[i],
                                                     "' does not hold: ", *l, " ", c.op, " ", *r,
                                                     " is false for {", env_str(), "}"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mcx
