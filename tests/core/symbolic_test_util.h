// Helpers shared by the symbolic-dimension tests (symbolic_scope_test.cc, symbolic_decision_test.cc): parse an
// expression or make a scope, failing the test (not crashing) on a bad one. Header-only.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/core/dim_expr.h"

namespace mcx::test {

inline constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
using Bounds = std::pair<int64_t, int64_t>;

inline DimExpr P(std::string_view s) {
  auto e = DimExpr::parse(s);
  EXPECT_TRUE(e.ok()) << s << ": " << e.status();
  return e.ok() ? *e : DimExpr();
}

inline SymbolicScope S(const std::vector<std::string>& cs) {
  auto s = SymbolicScope::create(cs);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : SymbolicScope();
}

}  // namespace mcx::test
