// Tracing under a SymbolicScope: the shape rules compare dimensions through the scope's decision procedure,
// so what the scope decides equal traces (JAX's jax#23437 and its mod(b, N) == 0 reshape), and dimensions of
// size 0 are allowed where the rules permit them.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"
#include "mcx/mcx.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

SymbolicScope scope_of(const std::vector<std::string>& constraints) {
  return value_or_throw(SymbolicScope::create(constraints));
}

TEST(SymbolicTrace, AddOfShapesTheScopeDecidesEqualBroadcasts) {
  const SymbolicScope scope = scope_of({"a == b"});
  AbstractValue x{DType::kFloat32, symbolic_shape("2*a")};
  AbstractValue y{DType::kFloat32, symbolic_shape("2*b")};
  ir::Program p = trace([](const Array& u, const Array& v) { return u + v; }, scope, x, y);
  EXPECT_TRUE(scope.known_equal(p.params[0].shape[0], p.params[1].shape[0]));
  EXPECT_EQ(p.result_types()[0].to_string(), "f32[2*a]");
  EXPECT_TRUE(ir::verify(p).ok()) << ir::verify(p) << "\n" << ir::print_program(p);
}

TEST(SymbolicTrace, AReshapeUnderModZeroIsAccepted) {
  const SymbolicScope scope = scope_of({"mod(b, 4) == 0"});
  AbstractValue x{DType::kFloat32, symbolic_shape("b, c")};
  ir::Program p = trace(
      [](const Array& u) {
        const DimExpr b = u.shape()[0], c = u.shape()[1];
        return reshape(u, Shape{floordiv(b, DimExpr(4)), DimExpr(2), DimExpr(2), c});
      },
      scope, x);
  EXPECT_EQ(p.result_types()[0].to_string(), "f32[b // 4,2,2,c]");
  EXPECT_TRUE(ir::verify(p).ok()) << ir::verify(p);
  // -1 is inferred through the scope too (JAX's threefry padding: a multiple of 4, reshaped by rows of 4).
  ir::Program q = trace([](const Array& u) { return reshape(u, Shape{DimExpr(-1), DimExpr(4)}); }, scope,
                        AbstractValue{DType::kFloat32, symbolic_shape("b")});
  EXPECT_EQ(q.result_types()[0].to_string(), "f32[b // 4,4]");
  // Without the constraint it is refused, and the error says what would decide it.
  EXPECT_THAT(testing_util::error_of([] {
                (void)trace([](const Array& u) { return reshape(u, Shape{DimExpr(-1), DimExpr(4)}); },
                            AbstractValue{DType::kFloat32, symbolic_shape("b")});
              }),
              AllOf(HasSubstr("not known to be a multiple of 4"), HasSubstr("mod(..., k) == 0")));
}

TEST(SymbolicTrace, InconclusiveShapesNameBothDimensions) {
  AbstractValue x{DType::kFloat32, symbolic_shape("a")};
  AbstractValue y{DType::kFloat32, symbolic_shape("b")};
  EXPECT_THAT(testing_util::error_of([&] { (void)trace([](const Array& u, const Array& v) { return u + v; }, x, y); }),
              AllOf(HasSubstr("dimension 0 is a vs b"), HasSubstr("a constraint 'a == b'")));
}

}  // namespace
}  // namespace mcx

namespace mcx {
namespace {

// JAX's symbolic_shape(spec, like=) and symbolic_args_specs: "_" from the example, "..." for the example's
// remaining dimensions, constants checked against it, one scope for every spec.
TEST(SymbolicArgsSpecs, UnderscoreEllipsisAndLike) {
  EXPECT_EQ(shape_to_string(symbolic_shape("b, _, 3", {std::nullopt, 5, 3})), "[b,5,3]");
  EXPECT_EQ(shape_to_string(symbolic_shape("b, ...", {4, 5, 6})), "[b,5,6]");
  EXPECT_EQ(shape_to_string(symbolic_shape("..., c", {4, 5, 6})), "[4,5,c]");
  EXPECT_EQ(shape_to_string(symbolic_shape("...", {4, 5})), "[4,5]");
  EXPECT_THAT(parse_shape_like("b, 4", {std::nullopt, 5}).status().message(), HasSubstr("dimension 1 is 4 but like's is 5"));
  EXPECT_THAT(parse_shape_like("b, _", {2, std::nullopt}).status().message(), HasSubstr("like leaves it unknown"));
  EXPECT_THAT(parse_shape_like("b, c, d", {2, 3}).status().message(), HasSubstr("expected 2 dimensions, found 3"));
  EXPECT_THAT(parse_shape_like("..., ...", {2, 3}).status().message(), HasSubstr("'...' may appear once"));

  const Array x = zeros(concrete_shape({8, 784})), y = zeros(concrete_shape({8, 10}), DType::kInt32);
  std::vector<AbstractValue> avals = symbolic_args_specs({x, y}, {"b, _", "b, ..."});
  ASSERT_EQ(avals.size(), 2u);
  EXPECT_EQ(avals[0].to_string(), "f32[b,784]");
  EXPECT_EQ(avals[1].to_string(), "i32[b,10]");
  avals = symbolic_args_specs({x, y}, {"b, ..."});  // one spec for every argument
  EXPECT_EQ(avals[1].to_string(), "i32[b,10]");
  // The specs share their variables: an export over them solves b once.
  Exported exp = export_fn([](const Array& a, const Array& l) { return sum(a, 1) + astype(sum(l, 1), DType::kFloat32); },
                           {.name = "specs"})(avals[0], avals[1]);
  EXPECT_EQ(exp.in_avals()[0].to_string(), "f32[b,784]");
  EXPECT_EQ(exp.call(zeros(concrete_shape({3, 784})), zeros(concrete_shape({3, 10}), DType::kInt32))[0].dims(),
            std::vector<int64_t>{3});
  EXPECT_THROW(symbolic_args_specs({x, y}, {"b, _", "b, _", "c"}), InvalidArgument);
}

}  // namespace
}  // namespace mcx

namespace mcx {
namespace {

// Dimensions of size 0 (jax#23437's ask, which JAX refuses): declaring "zero_sized(b)" lets b be 0 (JAX's
// "b >= 0" keeps meaning b >= 1 with a redundant constraint). The scope then
// decides with b >= 0, expressions built while tracing keep max(b, 1) (it is not b when b is 0), and an
// exported function is callable with an empty batch; without the constraint a 0 is refused, saying which
// constraint allows it.
TEST(ZeroSizedDimensions, AConstraintLetsAVariableBeZero) {
  const SymbolicScope scope = value_or_throw(SymbolicScope::create({"zero_sized(b)"}));
  EXPECT_TRUE(value_or_throw(SymbolicScope::create({"b >= 0"})).zero_allowed().empty());
  EXPECT_EQ(scope.zero_allowed(), std::set<std::string>{"b"});
  EXPECT_EQ(scope.bounds(value_or_throw(DimExpr::parse("b"))), (std::pair<int64_t, int64_t>{0, INT64_MAX}));
  EXPECT_FALSE(scope.ge(value_or_throw(DimExpr::parse("b")), DimExpr(1)).ok()) << "b >= 1 is no longer decided";
  EXPECT_TRUE(*SymbolicScope().ge(value_or_throw(DimExpr::parse("b")), DimExpr(1)));

  auto f = [](const Array& x) {
    const DimExpr rows = x.shape()[0];
    return std::make_tuple(x * 2.0f + 1.0f, sum(x, 0), dimension_as_value(max(rows, DimExpr(1)), DType::kInt64));
  };
  const Exported e = Exported::deserialize(
      export_fn(f, {.name = "empty_ok", .constraints = {"zero_sized(b)"}})(AbstractValue{DType::kFloat32, symbolic_shape("b, 3")})
          .serialize());
  const std::vector<Array> empty = e.call(zeros(concrete_shape({0, 3})));
  ASSERT_EQ(empty.size(), 3u);
  EXPECT_EQ(empty[0].dims(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty[1].to_vector<float>(), (std::vector<float>{0, 0, 0}));  // a sum over no rows
  EXPECT_EQ(empty[2].item<int64_t>(), 1) << "max(b, 1) at b = 0 (it was not simplified to b)";
  const std::vector<Array> two = e.call(ones(concrete_shape({2, 3})));
  EXPECT_EQ(two[1].to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(two[2].item<int64_t>(), 2);

  // Without the constraint, building max(b, 1) simplifies it to b, and a 0 is refused naming the constraint.
  EXPECT_EQ(max(value_or_throw(DimExpr::parse("b")), DimExpr(1)).to_string(), "b");
  const Exported strict = export_fn(f, {.name = "no_empty"})(AbstractValue{DType::kFloat32, symbolic_shape("b, 3")});
  EXPECT_THAT(testing_util::error_of([&] { (void)strict.call(zeros(concrete_shape({0, 3}))); }),
              AllOf(HasSubstr("Expected value >= 1 for dimension variable 'b', found 0"),
                    HasSubstr("the constraint 'zero_sized(b)' at export allows size 0")));
}

}  // namespace
}  // namespace mcx
