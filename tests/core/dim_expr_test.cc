#include "mcx/core/dim_expr.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

DimExpr P(std::string_view s) {
  auto e = DimExpr::parse(s);
  EXPECT_TRUE(e.ok()) << s << ": " << e.status();
  return e.ok() ? *e : DimExpr();
}
const DimExpr b = DimExpr::var("b");
const DimExpr c = DimExpr::var("c");

TEST(DimExprTest, ConstantsAndVariables) {
  DimExpr zero;
  EXPECT_TRUE(zero.is_constant());
  EXPECT_EQ(zero.constant_value(), 0);
  EXPECT_EQ(DimExpr(7).to_string(), "7");
  EXPECT_EQ(DimExpr(-7).to_string(), "-7");
  EXPECT_EQ(*DimExpr(42).to_int(), 42);
  EXPECT_FALSE(b.is_constant());
  EXPECT_EQ(b.constant_value(), std::nullopt);
  auto err = (b + 1).to_int();
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(std::string(err.status().message()), HasSubstr("b + 1"));
  EXPECT_EQ(b.to_string(), "b");
}

TEST(DimExprTest, PolynomialNormalisation) {
  EXPECT_EQ(b + b, 2 * b);
  EXPECT_EQ(b - b, DimExpr(0));
  EXPECT_EQ((b + 1) * (b - 1), b * b - 1);
  EXPECT_EQ(c + b, b + c);
  EXPECT_EQ(c * b, b * c);
  EXPECT_EQ((2 * b + 1).to_string(), "2*b + 1");
  EXPECT_EQ((b * c - 3).to_string(), "b*c - 3");
  EXPECT_EQ((b * b).to_string(), "b^2");
  EXPECT_EQ((1 - b).to_string(), "-b + 1");
  EXPECT_EQ((c + b * b + 3 * b * c - 2).to_string(), "b^2 + 3*b*c + c - 2");
  EXPECT_EQ(DimExpr(3) * DimExpr(4), DimExpr(12));
  EXPECT_EQ((b + 2) * 3 - 6, 3 * b);
  EXPECT_EQ(-(b - c), c - b);
  EXPECT_NE(b, c);
  EXPECT_NE(b + 1, b);
}

TEST(DimExprTest, FloorDivModFolding) {
  EXPECT_EQ(floordiv(DimExpr(7), DimExpr(2)), DimExpr(3));
  EXPECT_EQ(floordiv(DimExpr(-7), DimExpr(2)), DimExpr(-4));  // Python semantics
  EXPECT_EQ(floordiv(DimExpr(7), DimExpr(-2)), DimExpr(-4));
  EXPECT_EQ(mod(DimExpr(-7), DimExpr(2)), DimExpr(1));
  EXPECT_EQ(mod(DimExpr(7), DimExpr(-2)), DimExpr(-1));
  EXPECT_EQ(floordiv(b, DimExpr(1)), b);
  EXPECT_EQ(floordiv(3 * b, DimExpr(3)), b);
  EXPECT_EQ(floordiv(6 * b + 4, DimExpr(2)), 3 * b + 2);
  EXPECT_EQ(floordiv(2 * b + 1, DimExpr(2)), b);
  EXPECT_EQ(floordiv(2 * b + 3, DimExpr(2)), b + 1);
  EXPECT_EQ(floordiv(4 * b + c, DimExpr(2)), 2 * b + floordiv(c, DimExpr(2)));
  EXPECT_EQ(mod(4 * b + c, DimExpr(2)), mod(c, DimExpr(2)));
  EXPECT_EQ(mod(3 * b, DimExpr(3)), DimExpr(0));
  EXPECT_EQ(mod(b, DimExpr(1)), DimExpr(0));
  EXPECT_EQ(floordiv(b * c, b), c);
  EXPECT_EQ(floordiv(b, b), DimExpr(1));
  EXPECT_EQ(mod(b * c + b, b), DimExpr(0));
  EXPECT_EQ(floordiv(floordiv(b, DimExpr(2)), DimExpr(3)), floordiv(b, DimExpr(6)));
  // Polynomial long division by a symbolic divisor.
  EXPECT_EQ(floordiv(b * b + 2 * b + 1, b + 1), b + 1);
  EXPECT_EQ(floordiv(b * c + b, c + 1), b);
  EXPECT_EQ(mod(b * b - c * c, b - c), DimExpr(0));
  EXPECT_EQ(floordiv(b * b + 2 * b + 2, b + 1).to_string(), "(b^2 + 2*b + 2) // (b + 1)");
  EXPECT_EQ(floordiv(c, DimExpr(2)).to_string(), "c // 2");
  EXPECT_EQ(floordiv(b + 1, DimExpr(2)).to_string(), "(b + 1) // 2");
  EXPECT_EQ(mod(b, DimExpr(4)).to_string(), "b % 4");
  EXPECT_EQ(floordiv(b, c).to_string(), "b // c");
  EXPECT_EQ((2 * floordiv(c, DimExpr(2))).to_string(), "2*(c // 2)");
  EXPECT_EQ((-floordiv(c, DimExpr(2))).to_string(), "-(c // 2)");
  EXPECT_EQ((b - floordiv(c, DimExpr(2))).to_string(), "b - c // 2");
}

TEST(DimExprTest, MaxMin) {
  EXPECT_EQ(max(b, b), b);
  EXPECT_EQ(min(b, b), b);
  EXPECT_EQ(max(DimExpr(3), DimExpr(5)), DimExpr(5));
  EXPECT_EQ(min(DimExpr(3), DimExpr(5)), DimExpr(3));
  EXPECT_EQ(max(b, DimExpr(1)), b);  // variables are >= 1
  EXPECT_EQ(min(b, DimExpr(1)), DimExpr(1));
  EXPECT_EQ(max(b + 1, b), b + 1);
  EXPECT_EQ(min(b + 1, b), b);
  EXPECT_EQ(max(b, c), max(c, b));
  EXPECT_EQ(min(b, c), min(c, b));
  EXPECT_EQ(max(b, DimExpr(16)).to_string(), "max(b, 16)");
  EXPECT_EQ(min(b, c).to_string(), "min(b, c)");
  EXPECT_NE(max(b, c), min(b, c));
}

TEST(DimExprTest, ParsePrintRoundTrip) {
  const char* cases[] = {
      "b", "2*b + 1", "b*c - 3", "b^2", "c // 2", "b % 4", "max(b, 16)", "min(b, c)", "(b + 1) // 2",
      "-b", "-b + 1", "3*b^2*c - b + 7", "2*(c // 2)", "-(c // 2)", "b - c // 2", "max(b, c) + 1",
      "(b*c) // (b + 1)", "(b - 1) % c", "max(b // 2, c % 3)", "min(max(b, 4), c)", "b // max(c, 2)",
      "(c // 2)^2", "b*(c % 3)", "x_1 + _y", "-5", "0", "floordiv(b, 3)", "mod(b, 3)", "(b^2 + 1) // b",
      "-b*c + 2*(b % 3) - 4*max(b, c) + 1",
  };
  for (const char* text : cases) {
    SCOPED_TRACE(text);
    const DimExpr e = P(text);
    const std::string printed = e.to_string();
    const DimExpr again = P(printed);
    EXPECT_EQ(again, e) << printed;
    EXPECT_EQ(again.to_string(), printed);
  }
  // Exact normal-form text for some.
  EXPECT_EQ(P("1 + 2*b").to_string(), "2*b + 1");
  EXPECT_EQ(P("c*b").to_string(), "b*c");
  EXPECT_EQ(P("b ** 2").to_string(), "b^2");
  EXPECT_EQ(P("2*c // 2").to_string(), "c");        // (2*c) // 2, like Python
  EXPECT_EQ(P("-c // 2").to_string(), "(-c) // 2");  // unary minus binds tighter
  EXPECT_EQ(P("  b  +  1 ").to_string(), "b + 1");
  EXPECT_EQ(P("b - (c - b)"), 2 * b - c);
}

// Random expressions built through the operators: printing and parsing again gives the same value.
TEST(DimExprTest, RandomRoundTripAndEvaluation) {
  std::mt19937 rng(3);
  const DimExpr vars[] = {DimExpr::var("a"), b, c};
  std::function<DimExpr(int)> gen = [&](int depth) -> DimExpr {
    const int k = depth <= 0 ? static_cast<int>(rng() % 2) : static_cast<int>(rng() % 9);
    switch (k) {
      case 0: return DimExpr(static_cast<int64_t>(rng() % 7) - 2);
      case 1: return vars[rng() % 3];
      case 2: return gen(depth - 1) + gen(depth - 1);
      case 3: return gen(depth - 1) - gen(depth - 1);
      case 4: return gen(depth - 1) * gen(depth - 1);
      case 5: return floordiv(gen(depth - 1), DimExpr(static_cast<int64_t>(rng() % 4) + 1));
      case 6: return mod(gen(depth - 1), DimExpr(static_cast<int64_t>(rng() % 4) + 2));
      case 7: return max(gen(depth - 1), gen(depth - 1));
      default: return min(gen(depth - 1), gen(depth - 1));
    }
  };
  for (int i = 0; i < 500; ++i) {
    const DimExpr e = gen(4);
    const std::string text = e.to_string();
    auto parsed = DimExpr::parse(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    ASSERT_EQ(*parsed, e) << text << " reparsed as " << parsed->to_string();
    ASSERT_EQ(parsed->to_string(), text);
    const std::map<std::string, int64_t> env = {{"a", 1 + static_cast<int64_t>(rng() % 9)},
                                                 {"b", 1 + static_cast<int64_t>(rng() % 9)},
                                                 {"c", 1 + static_cast<int64_t>(rng() % 9)}};
    EXPECT_EQ(*parsed->evaluate(env), *e.evaluate(env)) << text;
  }
}

// Normalisation must not change values: compare against a direct evaluation of the operations.
TEST(DimExprTest, SimplificationsPreserveValues) {
  for (int64_t bv = -6; bv <= 6; ++bv) {
    for (int64_t cv = 1; cv <= 5; ++cv) {
      const std::map<std::string, int64_t> env = {{"b", bv}, {"c", cv}};
      auto pyfd = [](int64_t x, int64_t y) { return (x - (((x % y) + y) % y)) / y; };
      EXPECT_EQ(*floordiv(2 * b + 3, DimExpr(2)).evaluate(env), pyfd(2 * bv + 3, 2));
      EXPECT_EQ(*floordiv(4 * b + c, DimExpr(2)).evaluate(env), pyfd(4 * bv + cv, 2));
      EXPECT_EQ(*mod(4 * b + c + 5, DimExpr(2)).evaluate(env), (((4 * bv + cv + 5) % 2) + 2) % 2);
      EXPECT_EQ(*floordiv(b, DimExpr(-3)).evaluate(env), pyfd(bv, -3));
      EXPECT_EQ(*mod(b, DimExpr(-3)).evaluate(env), bv - (-3) * pyfd(bv, -3));
      EXPECT_EQ(*floordiv(floordiv(b, DimExpr(2)), DimExpr(3)).evaluate(env), pyfd(pyfd(bv, 2), 3));
    }
  }
}

TEST(DimExprTest, ParseErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "unexpected end"}, {"b +", "unexpected end"}, {"b + )", "unexpected ')'"},
      {"(b + 1", "expected ')'"}, {"b / 2", "use '//'"}, {"foo(b, 2)", "unknown function 'foo'"},
      {"max(b)", "expected ','"}, {"b $ c", "unexpected '$'"}, {"b^c", "exponent"},
      {"99999999999999999999", "out of range"}, {"b c", "unexpected 'c'"},
  };
  for (auto [text, expect] : cases) {
    auto e = DimExpr::parse(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(expect)) << text;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr("position")) << text;
  }
}

TEST(DimExprTest, EvaluateAndSubstitute) {
  const DimExpr e = P("2*b*c + max(b, c // 2) - b % 3");
  EXPECT_EQ(*e.evaluate({{"b", 5}, {"c", 12}}), 2 * 5 * 12 + 6 - 2);
  auto missing = e.evaluate({{"b", 5}});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'c'"));
  auto divzero = floordiv(b, c).evaluate({{"b", 5}, {"c", 0}});
  ASSERT_FALSE(divzero.ok());
  EXPECT_THAT(std::string(divzero.status().message()), HasSubstr("division by zero"));
  EXPECT_FALSE(floordiv(b, DimExpr(0)).evaluate({{"b", 1}}).ok());
  auto big = (b * b * b).evaluate({{"b", int64_t{1} << 22}});
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("overflow"));
  EXPECT_EQ(*(b * b * b).evaluate({{"b", int64_t{1} << 20}}), int64_t{1} << 60);
  EXPECT_EQ(e.variables(), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(P("max(x, y // z)").variables(), (std::vector<std::string>{"x", "y", "z"}));
  const DimExpr s = e.substitute({{"c", 2 * b}});
  EXPECT_EQ(s, P("4*b^2 + max(b, b) - b % 3"));
  EXPECT_EQ(s, 4 * b * b + b - mod(b, DimExpr(3)));
  EXPECT_EQ(e.substitute({{"b", DimExpr(5)}, {"c", DimExpr(12)}}), DimExpr(2 * 5 * 12 + 6 - 2));
  EXPECT_EQ(P("(b + 1) // 2").substitute({{"b", 2 * c + 1}}), c + 1);
}

TEST(DimExprTest, LinearInOneVar) {
  auto l = P("3*b + 2").as_linear_in_one_var();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->var, "b");
  EXPECT_EQ(l->factor, 3);
  EXPECT_EQ(l->offset, 2);
  l = P("-b").as_linear_in_one_var();
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->factor, -1);
  EXPECT_EQ(l->offset, 0);
  EXPECT_FALSE(P("b + c").as_linear_in_one_var());
  EXPECT_FALSE(P("b^2").as_linear_in_one_var());
  EXPECT_FALSE(P("b // 2").as_linear_in_one_var());
  EXPECT_FALSE(P("7").as_linear_in_one_var());
  EXPECT_FALSE(P("2*b*c").as_linear_in_one_var());
}

TEST(DimExprTest, HashAndOrder) {
  EXPECT_EQ(P("b + c").hash(), P("c + b").hash());
  EXPECT_EQ(std::hash<DimExpr>()(b), b.hash());
  EXPECT_TRUE(structurally_less(b, c) != structurally_less(c, b));
  EXPECT_FALSE(structurally_less(b, b));
  std::map<DimExpr, int, DimExprLess> m;
  m[P("b + 1")] = 1;
  m[P("1 + b")] = 2;
  m[P("c")] = 3;
  EXPECT_EQ(m.size(), 2u);
}

}  // namespace
}  // namespace mcx
