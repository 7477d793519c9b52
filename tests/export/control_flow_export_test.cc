// Exporting functions with control flow (opset 7): the regions survive serialisation, a symbolic batch
// reaches into loop bodies, the artifact records the opset it needs, a floating while loop leaves it without
// a VJP (and it says so), and a nesting deeper than the reader's limit is refused. Custom derivative rules
// (opset 8) survive too: the exported VJP and a VJP taken of the deserialised artifact use the rule.
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_same_values;
using testing_util::random_array;

TEST(ControlFlowExport, RoundTripsWithASymbolicBatchAndMatchesEager) {
  auto f = [](const Array& h0, const Array& xs) {
    auto [c, ys] = scan([](const Array& c, const Array& x) { return std::pair{tanh(c + x), sum(c, {1})}; }, h0, xs);
    Array d = cond(sum(c, {0, 1}) > 0.0f, [](const Array& v) { return v * 2.0f; }, [](const Array& v) { return -v; }, c);
    Array n = while_loop([](const Array& i) { return i < 3; }, [](const Array& i) { return i + 1; },
                         Array(Buffer::scalar<int32_t>(0)));
    return std::pair{d * astype(n, DType::kFloat32), ys};
  };
  Exported e = export_fn(f, {.name = "looped", .creation_time_unix_ms = 1})(
      AbstractValue{DType::kFloat32, symbolic_shape("b, 4")}, AbstractValue{DType::kFloat32, concrete_shape({5, 4})});
  EXPECT_EQ(e.artifact().opset_version, 7u);
  EXPECT_TRUE(e.has_vjp());  // scan and cond differentiate; the while loop counts integers only
  // A floating while loop has no reverse mode: the artifact is exported without its VJP, and says why.
  Exported w = export_fn([](const Array& x) {
    return while_loop([](const Array& v) { return sum(v, {0}) < 10.0f; }, [](const Array& v) { return v * 2.0f; }, x);
  })(zeros({2}) + 1.0f);
  EXPECT_FALSE(w.has_vjp());
  EXPECT_THAT(error_of([&] { w.vjp(); }), HasSubstr("such as control flow"));
  Exported back = Exported::deserialize(e.serialize());
  Array xs = random_array({5, 4}, 2);
  for (int64_t b : {1, 3}) {
    Array h0 = random_array({b, 4}, 10 + b);
    auto [want_d, want_ys] = f(h0, xs);
    std::vector<Array> got = back.call(h0, xs);
    ASSERT_EQ(got.size(), 2u);
    expect_same_values(got[0], want_d, 1e-6, 1e-6, "d");
    expect_same_values(got[1], want_ys, 1e-6, 1e-6, "ys");
  }
}

TEST(ControlFlowExport, RegionsNestedDeeperThanTheLimitAreRefused) {
  std::function<Array(int, const Array&)> nest = [&](int depth, const Array& x) -> Array {
    if (depth == 0) return x + 1.0f;
    return fori_loop(0, 1, [&](const Array&, const Array& v) { return nest(depth - 1, v); }, x);
  };
  Exported shallow = export_fn([&](const Array& x) { return nest(15, x); }, {.with_vjp = false})(zeros({2}));
  EXPECT_EQ(Exported::deserialize(shallow.serialize()).call(zeros({2}))[0].to_vector<float>(),
            (std::vector<float>{1, 1}));
  Exported deep = export_fn([&](const Array& x) { return nest(17, x); }, {.with_vjp = false})(zeros({2}));
  EXPECT_THAT(error_of([&] { Exported::deserialize(deep.serialize()); }),
              HasSubstr("control-flow regions nest deeper than the limit 16"));
}

TEST(CustomRulesExport, TheArtifactKeepsTheRule) {
  // Gradient clipping: the identity (scaled) whose backward pass clips the cotangent to [-1, 1].
  auto clipped = custom_vjp([](const Array& x) { return x * 3.0f; },
                            [](const Array& x) { return std::pair{x * 3.0f, std::vector<Array>{}}; },
                            [](const std::vector<Array>&, const Array& g) { return clip(g * 3.0f, Array(-1.0f), Array(1.0f)); });
  Exported e = export_fn(clipped, {.name = "clipped"})(AbstractValue{DType::kFloat32, symbolic_shape("b")});
  EXPECT_EQ(e.artifact().opset_version, 8u);
  ASSERT_TRUE(e.has_vjp());
  Exported back = Exported::deserialize(e.serialize());
  Array x = Array(Buffer::from_vector<float>({1.0f, -2.0f, 0.5f}, {3}));
  EXPECT_EQ(back.call(x)[0].to_vector<float>(), (std::vector<float>{3.0f, -6.0f, 1.5f}));
  Array ct = Array(Buffer::from_vector<float>({0.1f, 5.0f, -2.0f}, {3}));
  std::vector<Array> g = back.vjp().call(x, ct);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{0.3f * 1.0f, 1.0f, -1.0f}));
}

}  // namespace
}  // namespace mcx
