// A CNN predictor (convolutions, max and average pooling) exported with a symbolic batch: the artifact
// declares opset 3, survives serialisation, and serves two batch sizes with eager's values; its exported
// VJP matches grad. A program without the new ops keeps declaring the opset it needs.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/ir/passes.h"
#include "mcx/mcx.h"
#include "mcx/trace/export.h"
#include "tests/support/reference_eval.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using testing_util::expect_allclose;
using testing_util::random_array;
using testing_util::expect_same_values;

// x [b, 8, 8, 1] -> conv 3x3 SAME (4), relu, 2x2 max pool -> conv 3x3 VALID (6), relu -> 2x2 SAME average
// pool -> dense: logits [b, 3].
Array cnn(const Tree& p, const Array& x) {
  Array h = max_pool(relu(conv(x, p.at("c1").array())), {2, 2}, {2, 2});         // [b, 4, 4, 4]
  h = relu(conv(h, p.at("c2").array(), {1, 1}, Padding::valid()));               // [b, 2, 2, 6]
  h = avg_pool(h, {2, 2}, {1, 1}, Padding::same());                              // [b, 2, 2, 6]
  return matmul(reshape(h, {h.shape()[0], DimExpr(24)}), p.at("d").array());     // [b, 3]
}

Tree cnn_params() {
  return Tree{{"c1", Tree(random_array({3, 3, 1, 4}, 1))},
              {"c2", Tree(random_array({3, 3, 4, 6}, 2))},
              {"d", Tree(random_array({24, 3}, 3))}};
}

TEST(WindowExport, SymbolicBatchCnnServesTwoBatchSizes) {
  Tree p = cnn_params();
  Exported exported = export_fn(cnn, {.name = "cnn", .constraints = {"b >= 1"}, .creation_time_unix_ms = 1})(
      p, AbstractValue{DType::kFloat32, symbolic_shape("b, 8, 8, 1")});
  EXPECT_EQ(exported.artifact().opset_version, 3u);
  EXPECT_EQ(exported.artifact().out_avals.at(0).to_string(), "f32[b,3]");
  Exported e = Exported::deserialize(exported.serialize());
  for (int64_t b : {2, 5}) {
    Array x = random_array({b, 8, 8, 1}, 10 + b);
    std::vector<Array> out = e.call(p, x);
    ASSERT_EQ(out.size(), 1u);
    expect_same_values(out[0], cnn(p, x), 1e-5, 1e-5, "b = " + std::to_string(b));
    ir::Program spec = value_or_throw(ir::specialize(e.artifact().program, {{"b", b}}));
    std::vector<Buffer> args = {p.at("c1").array().to_host(), p.at("c2").array().to_host(),
                                p.at("d").array().to_host(), x.to_host()};
    expect_allclose(out[0], value_or_throw(test::reference_evaluate(spec, args))[0].to_doubles(), 1e-5, 1e-5);
  }
  // The exported VJP (cotangent of ones) against grad of the summed logits.
  ASSERT_TRUE(e.has_vjp());
  Array x = random_array({3, 8, 8, 1}, 20);
  std::vector<Array> flat = {p.at("c1").array(), p.at("c2").array(), p.at("d").array(), x,
                             ones({3, 3}, DType::kFloat32)};
  std::vector<Array> g = e.vjp().call_flat(flat);
  ASSERT_EQ(g.size(), 4u);
  Array gx = grad([&](const Array& xx) { return sum(cnn(p, xx)); })(x);
  expect_same_values(g[3], gx, 1e-4, 1e-5);
}

TEST(WindowExport, ProgramsWithoutTheNewOpsKeepTheirOpset) {
  auto dense = [](const Array& w, const Array& x) { return tanh(matmul(x, w)); };
  Exported e = export_fn(dense, {.name = "dense"})(random_array({4, 2}, 4),
                                                   AbstractValue{DType::kFloat32, symbolic_shape("b, 4")});
  EXPECT_EQ(e.artifact().opset_version, 1u);
}

}  // namespace
}  // namespace mcx
