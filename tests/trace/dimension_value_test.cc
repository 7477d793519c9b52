// dimension_as_value (JAX's jnp.array(x.shape[0]) under shape polymorphism): a symbolic dimension used as a
// value in an exported function gives the call's value of it, for expressions with every kind of operation,
// checked against DimExpr::evaluate at several shapes.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"

namespace mcx {
namespace {

TEST(DimensionAsValue, ASymbolicDimensionIsTheCallsValue) {
  const char* exprs[] = {"b", "2*b + 3", "b*c - 1", "b // 3", "(b - 7) // 4", "b % 3", "(5 - b) % 4", "max(b, c + 2)",
                         "min(b, 4) * c", "b^2 - c", "-b // c", "(-b) % c"};
  for (const char* text : exprs) {
    const DimExpr e = value_or_throw(DimExpr::parse(text));
    auto f = [&](const Array& x, const Array& y) {
      return dimension_as_value(e, DType::kInt64) + astype(sum(x) * 0.0f + sum(y) * 0.0f, DType::kInt64);
    };
    Exported exp = export_fn(f, {.name = "dim_value"})(AbstractValue{DType::kFloat32, symbolic_shape("b")},
                                                       AbstractValue{DType::kFloat32, symbolic_shape("c")});
    for (int64_t b : {1, 2, 5, 11}) {
      for (int64_t c : {1, 3, 4}) {
        const std::vector<Array> out = exp.call(zeros(concrete_shape({b})), zeros(concrete_shape({c})));
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].item<int64_t>(), value_or_throw(e.evaluate({{"b", b}, {"c", c}})))
            << text << " at b=" << b << " c=" << c;
      }
    }
  }
}

TEST(DimensionAsValue, ConcreteDimensionsAndDtypes) {
  EXPECT_EQ(dimension_as_value(DimExpr(7)).item<int32_t>(), 7);
  EXPECT_EQ(dimension_as_value(DimExpr(7)).dtype(), DType::kInt32);
  EXPECT_THROW(dimension_as_value(DimExpr(7), DType::kFloat32), InvalidArgument);
}

}  // namespace
}  // namespace mcx
