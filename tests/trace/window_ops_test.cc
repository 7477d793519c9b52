// The convolution and pooling ops of the public library: values against the reference evaluator and
// hand-computed pools, dimension numbers and padding rules, gradients against central differences, and
// a batch-sharded (4 devices) forward and gradient step equal to one device. Runs with 8 CPU devices.
#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "tests/support/test_util.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;
using testing_util::expect_same_values;

Array rand_array(std::vector<int64_t> dims, uint64_t seed, DType t = DType::kFloat32) {
  return Array(test::random_buffer(t, std::move(dims), seed, -1, 1));
}

std::vector<double> host(const Array& a) { return a.to_host().to_doubles(); }

TEST(Conv, SameConvolutionMatchesReferenceEagerAndJitted) {
  Array x = rand_array({2, 7, 6, 3}, 1), w = rand_array({3, 3, 3, 5}, 2);
  auto f = [](const Array& x, const Array& w) { return conv(x, w); };
  Array eager = f(x, w);
  EXPECT_EQ(eager.aval().to_string(), "f32[2,7,6,5]");
  expect_allclose(eager, testing_util::reference(f, x, w)[0].to_doubles(), 1e-5, 1e-5);
  expect_same_values(jit(f)(x, w), eager, 0, 0);
}

TEST(Conv, PaddingRules) {
  Array x = rand_array({1, 28, 28, 2}, 3), w = rand_array({3, 3, 2, 4}, 4);
  EXPECT_EQ(conv(x, w, {2, 2}).aval().to_string(), "f32[1,14,14,4]");
  EXPECT_EQ(conv(x, w, {1, 1}, Padding::valid()).aval().to_string(), "f32[1,26,26,4]");
  EXPECT_EQ(conv(x, w, {1, 1}, {{2, 0}, {0, -1}}).aval().to_string(), "f32[1,28,25,4]");
  // 4x4 window, stride 1 on 5: total padding 3, SAME puts the odd element at the end, SAME_LOWER first.
  Array x5 = rand_array({1, 5, 1, 1}, 5), w4 = rand_array({4, 1, 1, 1}, 6);
  Array same = conv(x5, w4, {}, Padding::same()), lower = conv(x5, w4, {}, Padding::same_lower());
  Array explicit_same = conv(x5, w4, {}, {{1, 2}, {0, 0}}), explicit_lower = conv(x5, w4, {}, {{2, 1}, {0, 0}});
  expect_same_values(same, explicit_same, 0, 0);
  expect_same_values(lower, explicit_lower, 0, 0);
  EXPECT_THAT(error_of([&] { conv(x, w, {1, 1}, {{1, 1}}); }),
              HasSubstr("[conv_general_dilated] expected 2 entries in padding, found 1"));
}

TEST(Conv, DimensionNumbersPermuteTheSameComputation) {
  Array x = rand_array({2, 6, 5, 3}, 7), w = rand_array({3, 2, 3, 4}, 8);
  Array nhwc = conv_general_dilated(x, w, {1, 2}, Padding::same(), {}, {2, 1});
  Array nchw = conv_general_dilated(transpose(x, {0, 3, 1, 2}), transpose(w, {3, 2, 0, 1}), {1, 2}, Padding::same(),
                                    {}, {2, 1}, {"NCHW", "OIHW", "NCHW"});
  expect_same_values(transpose(nchw, {0, 2, 3, 1}), nhwc, 1e-5, 1e-6);
  Array explicit_nhwc = conv_general_dilated(x, w, {1, 2}, Padding::same(), {}, {2, 1}, {"NHWC", "HWIO", "NHWC"});
  expect_same_values(explicit_nhwc, nhwc, 0, 0);
  EXPECT_THAT(error_of([&] { conv_general_dilated(x, w, {1, 1}, Padding::same(), {}, {}, {"NHWC", "HWIO", "NCW"}); }),
              HasSubstr("[conv_general_dilated] expected dimension numbers of rank 4"));
  EXPECT_THAT(error_of([&] { conv(x, rand_array({3, 3, 2, 4}, 9)); }),
              HasSubstr("[conv_general_dilated] expected lhs f32[2,6,5,3] feature dim 3 to be rhs f32[3,3,2,4]"));
}

TEST(Conv, DepthwiseAndIntegerOperands) {
  Array x = rand_array({1, 5, 5, 3}, 10), w = rand_array({3, 3, 1, 3}, 11);
  auto f = [](const Array& x, const Array& w) { return conv(x, w, {}, Padding::same(), {}, 3); };
  expect_allclose(f(x, w), testing_util::reference(f, x, w)[0].to_doubles(), 1e-5, 1e-5);
  Array xi = astype(x * 4.0f, DType::kInt32), wi = astype(w * 4.0f, DType::kInt32);
  EXPECT_EQ(conv(xi, wi, {}, Padding::same(), {}, 3).dtype(), DType::kFloat32);
}

TEST(Pooling, MaxAndAveragePoolsOfARamp) {
  Array x = reshape(arange(0, 16, 1, DType::kFloat32), {1, 4, 4, 1});
  expect_allclose(max_pool(x, {2, 2}, {2, 2}), {5, 7, 13, 15});
  expect_allclose(avg_pool(x, {2, 2}, {2, 2}), {2.5, 4.5, 10.5, 12.5});
  EXPECT_EQ(max_pool(x, {2, 2}).aval().to_string(), "f32[1,3,3,1]");  // flax: strides default to 1
  // 3x3 SAME windows of a 2x2 image: every window holds the whole image (4 of 9 elements).
  Array y = reshape(arange(1, 5, 1, DType::kFloat32), {1, 2, 2, 1});
  expect_allclose(avg_pool(y, {3, 3}, {1, 1}, Padding::same()), {10.0 / 9, 10.0 / 9, 10.0 / 9, 10.0 / 9});
  expect_allclose(avg_pool(y, {3, 3}, {1, 1}, Padding::same(), false), {2.5, 2.5, 2.5, 2.5});
  expect_allclose(max_pool(-y, {3, 3}, {1, 1}, Padding::same()), {-1, -1, -1, -1});  // padding is -inf
  expect_allclose(reduce_window(y, ReduceOp::kMin, {1, 2, 1, 1}, {}, Padding::valid()), {1, 2});
  EXPECT_THAT(error_of([&] { max_pool(y, {2}); }), HasSubstr("[max_pool] expected x of rank 3"));
  EXPECT_THAT(error_of([&] { reduce_window(y, ReduceOp::kProd, {1, 1, 1, 1}); }),
              HasSubstr("[reduce_window] expected sum, max or min, found prod"));
}

// A small CNN loss: conv -> relu -> 2x2 max pool -> 2x2 SAME average pool -> dense, squared.
Array cnn_loss(const Array& w, const Array& x, const Array& v) {
  Array h = relu(conv(x, w, {1, 1}, Padding::same()));
  Array p = avg_pool(max_pool(h, {2, 2}, {2, 2}), {2, 2}, {1, 1}, Padding::same(), false);
  return sum(square(matmul(reshape(p, {p.shape()[0], DimExpr(-1)}), v)));
}
double cnn_loss_value(const Array& w, const Array& x, const Array& v) { return host(cnn_loss(w, x, v))[0]; }

TEST(ConvGrad, SmallCnnMatchesCentralDifferences) {
  Array w = rand_array({3, 3, 2, 3}, 12, DType::kFloat64);
  Array x = rand_array({2, 6, 5, 2}, 13, DType::kFloat64);
  Array v = rand_array({18, 2}, 14, DType::kFloat64);  // pooled [2, 3, 2, 3] flattened per example
  auto [gw, gx] = jit(grad(cnn_loss, argnums<0, 1>))(w, x, v);
  for (int which = 0; which < 2; ++which) {
    const Array& param = which == 0 ? w : x;
    const std::vector<double> g = host(which == 0 ? gw : gx), p0 = host(param);
    for (size_t k = 0; k < p0.size(); k += 7) {
      auto at = [&](double delta) {
        std::vector<double> p = p0;
        p[k] += delta;
        Array moved = Array(test::buffer_from_doubles(DType::kFloat64, param.to_host().dims(), p));
        return which == 0 ? cnn_loss_value(moved, x, v) : cnn_loss_value(w, moved, v);
      };
      const double h = 1e-6, fd = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(g[k], fd, 1e-6 + 1e-5 * std::fabs(fd)) << (which == 0 ? "w" : "x") << " element " << k;
    }
  }
}

TEST(ConvOnMesh, BatchShardedForwardAndGradientEqualOneDevice) {
  Mesh mesh = make_mesh({4}, {"data"});
  Array w = rand_array({3, 3, 2, 3}, 15), x = rand_array({8, 6, 6, 2}, 16), v = rand_array({27, 2}, 17);
  auto forward = [](const Array& w, const Array& x) { return max_pool(relu(conv(x, w)), {2, 2}, {2, 2}); };
  Array one = jit(forward)(w, x);
  auto sharded = jit(forward, {.name = "cnn_forward",
                               .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))},
                               .out_shardings = {NamedSharding(mesh, P("data"))}});
  Array four = sharded(w, x);
  EXPECT_EQ(four.addressable_shards().size(), 4u);
  expect_allclose(four, host(one), 1e-6, 1e-6);

  auto step = [](const Array& w, const Array& x, const Array& v) { return grad(cnn_loss)(w, x, v); };
  Array g1 = jit(step)(w, x, v);
  auto sharded_step = jit(step, {.name = "cnn_grad",
                                 .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data")),
                                                  NamedSharding(mesh, P())},
                                 .out_shardings = {NamedSharding(mesh, P())}});
  Array g4 = sharded_step(w, x, v);
  EXPECT_TRUE(g4.is_fully_replicated());
  expect_allclose(g4, host(g1), 1e-5, 1e-5);
}

}  // namespace
}  // namespace mcx
