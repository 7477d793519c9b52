#include <chrono>
#include <limits>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/dim_expr.h"
#include "tests/core/symbolic_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using test::Bounds;
using test::kInf;
using test::kNegInf;
using test::P;
using test::S;
// A decided comparison, or nullopt (printed by gtest) when it was inconclusive.
std::optional<bool> D(const absl::StatusOr<bool>& r) {
  if (!r.ok()) return std::nullopt;
  return *r;
}

TEST(SymbolicScopeTest, DefaultBounds) {
  SymbolicScope s;
  EXPECT_EQ(s.bounds(P("b")), Bounds(1, kInf));
  EXPECT_EQ(s.bounds(P("7")), Bounds(7, 7));
  EXPECT_EQ(s.bounds(P("2*b + 3")), Bounds(5, kInf));
  EXPECT_EQ(s.bounds(P("-b")), Bounds(kNegInf, -1));
  EXPECT_EQ(s.bounds(P("b - c")), Bounds(kNegInf, kInf));
  EXPECT_EQ(s.bounds(P("b*c")), Bounds(1, kInf));
  EXPECT_EQ(s.bounds(P("b^2 - 1")), Bounds(0, kInf));
  EXPECT_EQ(s.bounds(P("b % 4")), Bounds(0, 3));
  EXPECT_EQ(s.bounds(P("b // 4")), Bounds(0, kInf));
  EXPECT_EQ(s.bounds(P("(b + 7) // 4")), Bounds(2, kInf));
  EXPECT_EQ(s.bounds(P("min(b, 5)")), Bounds(1, 5));
  EXPECT_EQ(s.bounds(P("max(b, 5)")), Bounds(5, kInf));
  EXPECT_EQ(s.bounds(P("b % c")), Bounds(0, kInf));
  EXPECT_EQ(s.bounds(P("3 - b % 4")), Bounds(0, 3));
}

TEST(SymbolicScopeTest, DecidedComparisons) {
  SymbolicScope s;
  EXPECT_EQ(D(s.ge(P("b"), P("1"))), true);
  EXPECT_EQ(D(s.ge(P("2*b"), P("b"))), true);
  EXPECT_EQ(D(s.gt(P("b + 1"), P("b"))), true);
  EXPECT_EQ(D(s.gt(P("b"), P("b"))), false);
  EXPECT_EQ(D(s.ge(P("b"), P("b"))), true);
  EXPECT_EQ(D(s.ge(P("0"), P("b"))), false);
  EXPECT_EQ(D(s.le(P("b % 4"), P("3"))), true);
  EXPECT_EQ(D(s.lt(P("b*c"), P("1"))), false);
  EXPECT_EQ(D(s.ge(P("b*c"), P("c"))), true);
}

TEST(SymbolicScopeTest, InconclusiveComparisonsNameBothSides) {
  SymbolicScope s;
  auto r = s.ge(P("b"), P("16"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inconclusive dimension comparison: b >= 16"));
  r = s.gt(P("b"), P("c"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("inconclusive dimension comparison: b > c"));
  r = s.le(P("b"), P("2*c + 1"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("inconclusive dimension comparison: 2*c + 1 >= b"));
}

TEST(SymbolicScopeTest, InequalityConstraints) {
  const SymbolicScope s = S({"b >= 16", "c <= 8", "d > 2", "e < 4"});
  EXPECT_EQ(s.bounds(P("b")), Bounds(16, kInf));
  EXPECT_EQ(s.bounds(P("c")), Bounds(1, 8));
  EXPECT_EQ(s.bounds(P("d")), Bounds(3, kInf));
  EXPECT_EQ(s.bounds(P("e")), Bounds(1, 3));
  EXPECT_EQ(D(s.ge(P("b"), P("16"))), true);
  EXPECT_EQ(D(s.ge(P("b"), P("2*c"))), true);
  EXPECT_EQ(D(s.lt(P("b"), P("c"))), false);
  EXPECT_EQ(D(s.gt(P("b - c"), P("7"))), true);
  EXPECT_EQ(s.bounds(P("2*b - 3*c")), Bounds(8, kInf));
  EXPECT_FALSE(s.ge(P("b"), P("17")).ok());
  auto r = s.ge(P("b"), P("17"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("b >= 16"));  // constraints listed
}

TEST(SymbolicScopeTest, ConstraintsBetweenExpressions) {
  const SymbolicScope s = S({"b >= c", "c >= 8"});
  EXPECT_EQ(D(s.ge(P("b"), P("c"))), true);
  EXPECT_EQ(D(s.ge(P("2*b"), P("2*c"))), true);
  EXPECT_EQ(D(s.ge(P("b + 1"), P("c"))), true);
  EXPECT_EQ(s.bounds(P("b")).first, 8);  // propagated through b >= c >= 8
  EXPECT_EQ(D(s.ge(P("b"), P("8"))), true);
  EXPECT_FALSE(s.ge(P("c"), P("b")).ok());
}

TEST(SymbolicScopeTest, EqualityConstraintsRewrite) {
  const SymbolicScope s = S({"b == 2*c"});
  EXPECT_TRUE(s.known_equal(P("b"), P("2*c")));
  EXPECT_TRUE(s.known_equal(P("b // 2"), P("c")));
  EXPECT_TRUE(s.known_equal(P("b + c"), P("3*c")));
  EXPECT_FALSE(s.known_equal(P("b"), P("c")));
  EXPECT_EQ(s.bounds(P("b")), Bounds(2, kInf));
  EXPECT_EQ(s.bounds(P("b % 2")), Bounds(0, 0));
  EXPECT_EQ(D(s.ge(P("b"), P("c"))), true);
  EXPECT_EQ(D(s.gt(P("b"), P("c"))), true);

  // Inequalities are rewritten too: b >= 16 becomes 2*c >= 16, so c >= 8.
  const SymbolicScope both = S({"b == 2*c", "b >= 16"});
  EXPECT_EQ(both.bounds(P("c")), Bounds(8, kInf));
  EXPECT_EQ(both.bounds(P("b")), Bounds(16, kInf));
  EXPECT_EQ(S({"b == 5"}).bounds(P("b*c")), Bounds(5, kInf));
  EXPECT_EQ(S({"b == 5"}).bounds(P("b + 1")), Bounds(6, 6));

  const SymbolicScope atom = S({"max(a, b) == c", "c <= 64"});
  EXPECT_TRUE(atom.known_equal(P("max(a, b)"), P("c")));
  EXPECT_EQ(D(atom.le(P("max(a, b)"), P("64"))), true);
  EXPECT_EQ(atom.bounds(P("max(b, a) + 1")), Bounds(2, 65));
}

TEST(SymbolicScopeTest, TermRewritesAndModZero) {
  const SymbolicScope s = S({"2*b == c"});
  EXPECT_TRUE(s.known_equal(P("4*b"), P("2*c")));
  EXPECT_TRUE(s.known_equal(P("2*b + 1"), P("c + 1")));
  EXPECT_EQ(s.bounds(P("c")), Bounds(2, kInf));  // c itself is not rewritten, but is 2*b >= 2
  EXPECT_EQ(s.bounds(P("2*b - c")), Bounds(0, 0));
  const SymbolicScope r = S({"c == 3*b"});  // a single-term right side is used when the left is not one
  EXPECT_TRUE(r.known_equal(P("c"), P("3*b")));
  const SymbolicScope m = S({"b % 8 == 0"});
  EXPECT_TRUE(m.known_equal(P("8*(b // 8)"), P("b")));
  EXPECT_TRUE(m.known_equal(P("b % 8"), P("0")));
  EXPECT_EQ(m.bounds(P("b - 8*(b // 8)")), Bounds(0, 0));
  auto dup = SymbolicScope::create({"b == 2*c", "b == 3*d"});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("'b == 3*d' gives a second rewrite for 'b'"));
  // Neither side a single term: kept as the two inequalities.
  const SymbolicScope both = S({"b + c == d + 1"});
  EXPECT_EQ(D(both.ge(P("b + c"), P("d + 1"))), true);
  EXPECT_EQ(D(both.le(P("b + c"), P("d + 1"))), true);
  EXPECT_TRUE(both.known_equal(P("b + c"), P("d + 1")));
}

TEST(SymbolicScopeTest, ConstraintOnAtom) {
  const SymbolicScope s = S({"max(a, b) <= 64", "b % 8 == 0"});
  EXPECT_EQ(s.bounds(P("max(a, b)")), Bounds(1, 64));
  EXPECT_EQ(D(s.le(P("max(a, b)"), P("64"))), true);
  EXPECT_TRUE(s.known_equal(P("b % 8"), P("0")));
  EXPECT_EQ(s.bounds(P("b % 8 + 1")), Bounds(1, 1));
}

TEST(SymbolicScopeTest, KnownEqualWithoutConstraints) {
  SymbolicScope s;
  EXPECT_TRUE(s.known_equal(P("b + c"), P("c + b")));
  EXPECT_TRUE(s.known_equal(P("(2*b) // 2"), P("b")));
  EXPECT_FALSE(s.known_equal(P("b"), P("c")));
  EXPECT_FALSE(s.known_equal(P("b // 2"), P("b")));
}

TEST(SymbolicScopeTest, MalformedConstraints) {
  const std::pair<const char*, const char*> cases[] = {
      {"b", "no comparison operator"},
      {"b = 3", "'=' is not a comparison"},
      {"b >= 3 >= 2", "more than one comparison"},
      {"b >= )", "malformed constraint 'b >= )'"},
      {"1 >= 2", "can never hold"},
  };
  for (auto [text, expect] : cases) {
    auto s = SymbolicScope::create({text});
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(expect)) << text;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(text)) << text;
  }
}

TEST(SymbolicScopeTest, CheckConcreteValues) {
  const SymbolicScope s = S({"b >= 16", "b == 2*c", "max(a, b) <= 64"});
  ASSERT_EQ(s.constraints().size(), 3u);
  ASSERT_EQ(s.parsed().size(), 3u);
  EXPECT_EQ(s.parsed()[1].op, "==");
  EXPECT_EQ(s.parsed()[1].rhs, P("2*c"));
  EXPECT_TRUE(s.check({{"a", 3}, {"b", 16}, {"c", 8}}).ok());
  auto st = s.check({{"a", 3}, {"b", 8}, {"c", 4}});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("'b >= 16'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("8 >= 16"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("b = 8"));
  st = s.check({{"a", 3}, {"b", 16}, {"c", 9}});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("'b == 2*c'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("16 == 18"));
  st = s.check({{"a", 100}, {"b", 16}, {"c", 8}});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("max(a, b) <= 64"));
  st = s.check({{"b", 16}, {"c", 8}});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("'a'"));
}

// Bounds must be sound: for random values satisfying the constraints, every value lies in the bounds.
TEST(SymbolicScopeTest, BoundsAreSound) {
  const SymbolicScope s = S({"b >= 4", "c <= 10", "b >= c"});
  const char* exprs[] = {"b - c", "2*b - 3*c + 5", "b*c - b", "(b + c) // 3", "b % c", "max(b, c) - min(b, c)",
                         "c - b", "b // c", "-b*c + 2*c^2", "(b - c) % 4"};
  for (const char* text : exprs) {
    const DimExpr e = P(text);
    const auto [lo, hi] = s.bounds(e);
    for (int64_t bv = 1; bv <= 30; ++bv) {
      for (int64_t cv = 1; cv <= 30; ++cv) {
        if (!s.check({{"b", bv}, {"c", cv}}).ok()) continue;
        const int64_t v = *e.evaluate({{"b", bv}, {"c", cv}});
        EXPECT_LE(lo, v) << text << " b=" << bv << " c=" << cv;
        EXPECT_GE(hi, v) << text << " b=" << bv << " c=" << cv;
      }
    }
  }
}

// Operands are shared between nested operations; bounding must not re-visit them exponentially often
// (depth 16 took minutes before bounds were memoised per query).
// 24 levels of operations that each use the previous level twice: a DAG whose tree has 2^24 paths.
TEST(SymbolicScopeTest, NestedOperationsStayFast) {
  const auto start = std::chrono::steady_clock::now();
  DimExpr e = DimExpr::var("a");
  std::map<std::string, int64_t> env = {{"a", 5}};
  for (int i = 0; i < 24; ++i) {
    const std::string name = "v" + std::to_string(i);
    const DimExpr v = DimExpr::var(name);
    env[name] = 2 + i % 3;
    e = (i % 2) ? max(e + v, v * e - 1) : floordiv(min(e, v) + e, DimExpr(2)) - v;
  }
  const SymbolicScope s = S({"a >= 3", "v0 <= 100"});
  const auto [lo, hi] = s.bounds(e);
  const int64_t value = *e.evaluate(env);
  EXPECT_LE(lo, value);
  EXPECT_GE(hi, value);
  // Rewriting (substitution) rebuilds shared operands once each.
  const SymbolicScope r = S({"a == 2*w"});
  const auto [rlo, rhi] = r.bounds(e);
  EXPECT_LE(rlo, rhi);
  const DimExpr sub = e.substitute({{"a", DimExpr(5)}});
  env.erase("a");
  EXPECT_EQ(*sub.evaluate(env), value);
  // Walks over the whole expression visit each shared operand once: 25 variables, and a fold asks for about ten
  // operations per level (a walk per path would ask for millions).
  EXPECT_EQ(e.variables().size(), 25u);
  int operations = 0;
  const DimExpr::Algebra count{[](const std::string&) { return 0; }, [](int64_t) { return 0; },
                               [&](char, int, int) { return ++operations; }};
  e.fold(count);
  EXPECT_LT(operations, 24 * 16);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#if defined(MCX_SANITIZER_BUILD)
  constexpr double kLimit = 10.0;  // ThreadSanitizer runs this about 20 times slower (0.9 s alone)
#else
  constexpr double kLimit = 2.0;  // 0.05 s alone; a walk per path (2^24 of them) takes minutes
#endif
  EXPECT_LT(seconds, kLimit);
}

}  // namespace
}  // namespace mcx
