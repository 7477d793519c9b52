// Solving dimension variables from concrete (and symbolic) argument shapes, and every error path.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/export/shape_solve.h"

namespace mcx::exporting {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Values = std::map<std::string, int64_t>;

struct Spec {
  std::vector<std::string> shapes;  // exported input shapes, e.g. "b, 2*b"
  std::vector<std::string> constraints = {};
};

// Holds the scope the signature points to.
struct Fixture {
  SymbolicScope scope;
  Signature sig;
  explicit Fixture(const Spec& spec) {
    scope = value_or_throw(SymbolicScope::create(spec.constraints));
    sig.fun_name = "f";
    for (size_t i = 0; i < spec.shapes.size(); ++i) {
      sig.in_names.push_back("args[" + std::to_string(i) + "]");
      sig.in_avals.push_back({DType::kFloat32, symbolic_shape(spec.shapes[i])});
    }
    sig.scope = &scope;
  }
  absl::StatusOr<Values> solve(const std::vector<std::vector<int64_t>>& dims) const {
    std::vector<AbstractValue> args;
    for (const auto& d : dims) args.push_back({DType::kFloat32, concrete_shape(d)});
    return solve_dim_values(sig, args);
  }
};

Values solved(const Spec& spec, const std::vector<std::vector<int64_t>>& dims) {
  auto r = Fixture(spec).solve(dims);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Values{};
}
std::string error(const Spec& spec, const std::vector<std::vector<int64_t>>& dims) {
  auto r = Fixture(spec).solve(dims);
  EXPECT_FALSE(r.ok()) << "solved unexpectedly";
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(SolveDims, SingleVariable) {
  EXPECT_EQ(solved({{"b, 784"}}, {{5, 784}}), (Values{{"b", 5}}));
  EXPECT_EQ(solved({{"b"}}, {{1}}), (Values{{"b", 1}}));
}

TEST(SolveDims, ScaledAndOffset) {
  EXPECT_EQ(solved({{"2*b"}}, {{8}}), (Values{{"b", 4}}));
  EXPECT_EQ(solved({{"b + 1"}}, {{8}}), (Values{{"b", 7}}));
  EXPECT_EQ(solved({{"3*b - 2"}}, {{10}}), (Values{{"b", 4}}));
}

TEST(SolveDims, LaterDimensionsAreVerified) {
  EXPECT_EQ(solved({{"b, 2*b, b + 1, b // 2, b % 3"}}, {{7, 14, 8, 3, 1}}), (Values{{"b", 7}}));
  // b // 2 alone cannot be solved but is checked once b is known from the second argument.
  EXPECT_EQ(solved({{"b // 2", "b"}}, {{3}, {7}}), (Values{{"b", 7}}));
}

TEST(SolveDims, SeveralVariablesAcrossArguments) {
  EXPECT_EQ(solved({{"b, h", "h, c", "b*c"}}, {{4, 6}, {6, 3}, {12}}), (Values{{"b", 4}, {"c", 3}, {"h", 6}}));
  // b*c + b is not linear until one of them is known from another argument: order does not matter.
  EXPECT_EQ(solved({{"b*c + b", "c"}}, {{20}, {4}}), (Values{{"b", 4}, {"c", 4}}));
  EXPECT_EQ(solved({{"b^2", "b"}}, {{49}, {7}}), (Values{{"b", 7}}));
}

TEST(SolveDims, ConstraintsAreChecked) {
  Spec spec{{"b, c"}, {"b >= 16", "b == 2*c"}};
  EXPECT_EQ(solved(spec, {{32, 16}}), (Values{{"b", 32}, {"c", 16}}));
  std::string e = error(spec, {{8, 4}});
  EXPECT_THAT(e, AllOf(HasSubstr("[Exported.call] 'f'"), HasSubstr("symbolic shape constraint 'b >= 16'"),
                       HasSubstr("found 8 >= 16 false"), HasSubstr("b = 8")));
  // With the rewrite b -> 2*c, the first dimension determines c; 33 is odd.
  e = error(spec, {{33, 16}});
  EXPECT_THAT(e, HasSubstr("Input shapes do not match"));
}

TEST(SolveDims, InconsistentDimensionNamesArgumentDimensionExpressionAndValue) {
  std::string e = error({{"b, b"}}, {{3, 4}});
  EXPECT_THAT(e, AllOf(HasSubstr("[Exported.call] 'f'"), HasSubstr("Found inconsistency between dimension 1 of args[0]"),
                       HasSubstr("specification 'b', found 4"), HasSubstr("evaluates to 3"),
                       HasSubstr("'b' = 3 from dimension 0 of args[0]"),
                       HasSubstr("Using the following polymorphic shapes specifications: args[0].shape = (b, b)")));
  e = error({{"b, 784"}}, {{3, 785}});
  EXPECT_THAT(e, AllOf(HasSubstr("dimension 1 of args[0] (specification '784', found 785)")));
}

TEST(SolveDims, DivisionWithRemainder) {
  std::string e = error({{"2*b"}}, {{7}});
  EXPECT_THAT(e, AllOf(HasSubstr("Division had remainder 1 when computing the value of 'b'"),
                       HasSubstr("dimension 0 of args[0] (specification '2*b', found 7)")));
}

TEST(SolveDims, ValueBelowOne) {
  std::string e = error({{"b + 4"}}, {{4}});
  EXPECT_THAT(e, HasSubstr("Expected value >= 1 for dimension variable 'b', found 0"));
  e = error({{"b"}}, {{0}});
  EXPECT_THAT(e, HasSubstr("Expected value >= 1 for dimension variable 'b'"));
}

TEST(SolveDims, NonLinearOnlyCannotBeSolved) {
  std::string e = error({{"b^2"}}, {{49}});
  EXPECT_THAT(e, AllOf(HasSubstr("Cannot solve for values of dimension variables {'b'}"),
                       HasSubstr("We can only solve linear uni-variate constraints"),
                       HasSubstr("args[0].shape = (b^2,)"), HasSubstr("Unprocessed specifications: 'b^2' for dimension 0 of args[0]")));
  e = error({{"b*c"}}, {{12}});
  EXPECT_THAT(e, HasSubstr("{'b', 'c'}"));
  e = error({{"b // 2"}}, {{3}});
  EXPECT_THAT(e, HasSubstr("Cannot solve"));
}

TEST(SolveDims, NonLinearCheckedAfterSolvingFails) {
  std::string e = error({{"b^2", "b"}}, {{50}, {7}});
  EXPECT_THAT(e, AllOf(HasSubstr("dimension 0 of args[0] (specification 'b^2', found 50)"), HasSubstr("evaluates to 49")));
}

TEST(SolveDims, DtypeRankAndCountErrors) {
  Fixture f({{"b, 3"}});
  std::vector<AbstractValue> args = {{DType::kFloat64, concrete_shape({2, 3})}};
  EXPECT_THAT(std::string(solve_dim_values(f.sig, args).status().message()),
              AllOf(HasSubstr("argument args[0] must have dtype float32"), HasSubstr("found f64[2,3]")));
  args = {{DType::kFloat32, concrete_shape({2, 3, 1})}};
  EXPECT_THAT(std::string(solve_dim_values(f.sig, args).status().message()),
              AllOf(HasSubstr("must have rank 2 (exported as f32[b,3]), found f32[2,3,1]")));
  args = {};
  EXPECT_THAT(std::string(solve_dim_values(f.sig, args).status().message()), HasSubstr("expected 1 arguments, found 0"));
}

TEST(SolveDims, SymbolicCallerShapes) {
  Fixture f({{"2*b, c"}});
  std::vector<AbstractValue> args = {{DType::kFloat32, symbolic_shape("2*n + 2, m")}};
  auto env = value_or_throw(solve_dim_vars(f.sig, args));
  EXPECT_EQ(env.at("b"), value_or_throw(DimExpr::parse("n + 1")));
  EXPECT_EQ(env.at("c"), DimExpr::var("m"));
  args = {{DType::kFloat32, symbolic_shape("2*n + 1, m")}};
  EXPECT_THAT(std::string(solve_dim_vars(f.sig, args).status().message()), HasSubstr("Cannot divide '2*n + 1' by 2"));
}

}  // namespace
}  // namespace mcx::exporting
