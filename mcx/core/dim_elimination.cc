#include "mcx/core/dim_elimination.h"

#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>

namespace mcx {
namespace {

// Coefficients beyond this are dropped rather than risk overflow in later combinations.
constexpr __int128 kMaxMagnitude = __int128{1} << 40;

int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

// The rows kept: for each coefficient vector, the smallest constant (the tightest row), which makes rows
// that differ only in their constant redundant.
using RowSet = std::map<std::vector<int64_t>, int64_t>;

struct Outcome {
  bool contradiction = false;
};

// Divides by the coefficients' gcd (flooring the constant: integer points only), then keeps the row.
// A row with no variables is checked (constant < 0: a contradiction) and dropped.
void insert(RowSet& rows, std::vector<int64_t> coeffs, int64_t constant, Outcome& out) {
  int64_t g = 0;
  for (int64_t c : coeffs) g = std::gcd(g, std::llabs(c));
  if (g == 0) {
    if (constant < 0) out.contradiction = true;
    return;
  }
  if (g > 1) {
    for (int64_t& c : coeffs) c /= g;
    constant = floor_div(constant, g);
  }
  auto [it, inserted] = rows.emplace(std::move(coeffs), constant);
  if (!inserted && constant < it->second) it->second = constant;
}

// p * a + n * b where a = -n[v] > 0 and b = p[v] > 0 cancel variable v; nullopt on overflow.
std::optional<std::pair<std::vector<int64_t>, int64_t>> combine(const std::vector<int64_t>& p, int64_t pc,
                                                                 const std::vector<int64_t>& n, int64_t nc, int v) {
  const __int128 a = -static_cast<__int128>(n[v]);
  const __int128 b = p[v];
  const __int128 g = std::gcd(static_cast<int64_t>(a), static_cast<int64_t>(b));
  const __int128 fa = a / g, fb = b / g;
  std::vector<int64_t> out(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const __int128 c = fa * p[i] + fb * n[i];
    if (c > kMaxMagnitude || c < -kMaxMagnitude) return std::nullopt;
    out[i] = static_cast<int64_t>(c);
  }
  out[v] = 0;
  const __int128 c = fa * pc + fb * nc;
  if (c > kMaxMagnitude * kMaxMagnitude || c < -kMaxMagnitude * kMaxMagnitude) return std::nullopt;
  if (c > std::numeric_limits<int64_t>::max() || c < std::numeric_limits<int64_t>::min()) return std::nullopt;
  return std::make_pair(std::move(out), static_cast<int64_t>(c));
}

}  // namespace

EliminationBounds eliminate_for_bounds(const std::vector<LinearRow>& given, int num_vars, int query) {
  EliminationBounds result;
  Outcome outcome;
  RowSet rows;
  for (const LinearRow& r : given) insert(rows, r.coeffs, r.constant, outcome);
  std::vector<bool> eliminated(static_cast<size_t>(num_vars), false);
  for (int round = 0; round < num_vars && !outcome.contradiction; ++round) {
    // The variable whose elimination adds the fewest rows.
    int best = -1;
    int64_t best_cost = 0;
    for (int v = 0; v < num_vars; ++v) {
      if (v == query || eliminated[static_cast<size_t>(v)]) continue;
      int64_t pos = 0, neg = 0;
      for (const auto& [coeffs, unused] : rows) {
        pos += coeffs[static_cast<size_t>(v)] > 0;
        neg += coeffs[static_cast<size_t>(v)] < 0;
      }
      const int64_t cost = pos * neg - pos - neg;
      if (best < 0 || cost < best_cost) {
        best = v;
        best_cost = cost;
      }
    }
    if (best < 0) break;
    eliminated[static_cast<size_t>(best)] = true;
    RowSet next;
    std::vector<const RowSet::value_type*> pos, neg;
    for (const auto& row : rows) {
      const int64_t c = row.first[static_cast<size_t>(best)];
      if (c > 0) pos.push_back(&row);
      if (c < 0) neg.push_back(&row);
      if (c == 0) next.insert(row);
    }
    if (next.size() + pos.size() * neg.size() > kMaxEliminationRows) return result;  // gives up: no bound
    for (const auto* p : pos) {
      for (const auto* n : neg) {
        auto r = combine(p->first, p->second, n->first, n->second, best);
        if (r) insert(next, std::move(r->first), r->second, outcome);
      }
    }
    rows = std::move(next);
  }
  if (outcome.contradiction) {
    result.infeasible = true;
    return result;
  }
  if (query < 0) return result;
  for (const auto& [coeffs, constant] : rows) {
    const int64_t a = coeffs[static_cast<size_t>(query)];  // the only non-zero coefficient left (gcd 1: +-1)
    if (a > 0) result.lo = std::max(result.lo, -floor_div(constant, a));  // a*z + c >= 0: z >= ceil(-c/a)
    if (a < 0) result.hi = std::min(result.hi, floor_div(constant, -a));   // z <= floor(c/-a)
  }
  if (result.lo > result.hi) result.infeasible = true;
  return result;
}

}  // namespace mcx
