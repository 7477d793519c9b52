// vmap at the API against a loop of single calls: axes, pytrees, per-example gradients, nesting, jit,
// convolutions (an unrolled rule) and the errors.
#include <cmath>

#include "gmock/gmock.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_same_values;

Array values(std::vector<int64_t> dims, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.7 * static_cast<double>(i + 1) * (seed + 1)));
  return array(v, dims);
}

// Row i of x's axis 0.
Array row(const Array& x, int64_t i) {
  Shape start(static_cast<size_t>(x.ndim()), DimExpr(0)), limit = x.shape();
  start[0] = DimExpr(i);
  limit[0] = DimExpr(i + 1);
  Shape rest(x.shape().begin() + 1, x.shape().end());
  return reshape(slice(x, start, limit), rest);
}

Tree mlp_params() { return Tree::Dict{{"w", values({4, 3}, 1)}, {"b", values({3}, 2)}}; }
Array predict(const Tree& p, const Array& x) { return softmax(tanh(matmul(x, p.at("w")) + p.at("b").array())); }
Array loss(const Tree& p, const Array& x, const Array& label) {
  return -sum(log(predict(p, x)) * one_hot(label, 3));
}

TEST(VmapTest, BatchedPredictEqualsALoopOfSingleCalls) {
  Tree p = mlp_params();
  Array xs = values({5, 4}, 3);
  Array batched = vmap(predict, {.in_axes = {std::nullopt, 0}})(p, xs);
  ASSERT_EQ(batched.dims(), (std::vector<int64_t>{5, 3}));
  for (int64_t i = 0; i < 5; ++i) expect_same_values(row(batched, i), predict(p, row(xs, i)), 1e-6, 1e-7);
}

TEST(VmapTest, PerExampleGradientsOverAPytree) {
  Tree p = mlp_params();
  Array xs = values({4, 4}, 5);
  Array labels = array({0, 2, 1, 2});
  Tree grads = vmap(grad(loss), {.in_axes = {std::nullopt, 0, 0}})(p, xs, labels);
  EXPECT_EQ(grads.at("w").array().dims(), (std::vector<int64_t>{4, 4, 3}));
  for (int64_t i = 0; i < 4; ++i) {
    Tree one = grad(loss)(p, row(xs, i), row(labels, i));
    expect_same_values(row(grads.at("w").array(), i), one.at("w").array(), 1e-5, 1e-6, "w");
    expect_same_values(row(grads.at("b").array(), i), one.at("b").array(), 1e-5, 1e-6, "b");
  }
  // A mapped pytree argument: every leaf is mapped over axis 0.
  Tree stacked = Tree::Dict{{"w", stack({values({4, 3}, 1), values({4, 3}, 7)})}, {"b", stack({values({3}, 2), values({3}, 8)})}};
  Array x = values({4}, 9);
  Array both = vmap(predict, {.in_axes = {0, std::nullopt}})(stacked, x);
  Tree second = Tree::Dict{{"w", values({4, 3}, 7)}, {"b", values({3}, 8)}};
  expect_same_values(row(both, 1), predict(second, x), 1e-6, 1e-7);
}

TEST(VmapTest, InAndOutAxesIncludingNegative) {
  auto f = [](const Array& a, const Array& b) { return a * sum(b); };
  Array a = values({3, 2}, 1), b = values({4, 2}, 2);
  // Map a's columns (axis 1) and b's axis -1 together; the batch axis goes last in the output.
  Array out = vmap(f, {.in_axes = {1, -1}, .out_axes = -1})(a, b);
  ASSERT_EQ(out.dims(), (std::vector<int64_t>{3, 2}));
  for (int64_t j = 0; j < 2; ++j) {
    Array col = reshape(slice(a, concrete_shape({0, j}), concrete_shape({3, j + 1})), concrete_shape({3}));
    Array bcol = reshape(slice(b, concrete_shape({0, j}), concrete_shape({4, j + 1})), concrete_shape({4}));
    Array want = f(col, bcol);
    Array got = reshape(slice(out, concrete_shape({0, j}), concrete_shape({3, j + 1})), concrete_shape({3}));
    expect_same_values(got, want, 1e-6, 1e-7);
  }
}

TEST(VmapTest, NestedVmapIsAnOuterProductAndComposesWithJit) {
  auto mul = [](const Array& a, const Array& b) { return a * b; };
  Array a = values({3}, 1), b = values({4}, 2);
  auto outer = vmap([&](const Array& x) { return vmap(mul, {.in_axes = {std::nullopt, 0}})(x, b); });
  Array o = outer(a);
  ASSERT_EQ(o.dims(), (std::vector<int64_t>{3, 4}));
  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), ov = o.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(ov[static_cast<size_t>(i * 4 + j)], av[i] * bv[j]);
  expect_same_values(jit(outer)(a), o, 0, 0);
  // jit inside vmap: the jitted function is inlined into the batched program.
  auto jitted = jit([](const Array& x) { return exp(x) + 1.0f; });
  Array xs = values({2, 3}, 4);
  expect_same_values(vmap(jitted)(xs), exp(xs) + 1.0f, 1e-6, 1e-7);
  // A static argument passes through unmapped.
  auto scale = [](const Array& x, double k) { return x * static_cast<float>(k); };
  expect_same_values(vmap(scale)(xs, 2.0), xs * 2.0f, 0, 0);
}

TEST(VmapTest, ConvolutionRunsPerExample) {
  // Shared kernel: the batch folds into the convolution's image batch; per-example kernels: one convolution each.
  auto conv1 = [](const Array& image, const Array& kernel) {  // image [1, 6, 6, 2] NHWC, kernel [3, 3, 2, 4] HWIO
    return relu(conv(image, kernel, {1, 1}, Padding::same()));
  };
  Array images = values({3, 1, 6, 6, 2}, 1), kernel = values({3, 3, 2, 4}, 2);
  Array out = vmap(conv1, {.in_axes = {0, std::nullopt}})(images, kernel);
  ASSERT_EQ(out.dims(), (std::vector<int64_t>{3, 1, 6, 6, 4}));
  for (int64_t i = 0; i < 3; ++i) expect_same_values(row(out, i), conv1(row(images, i), kernel), 1e-5, 1e-6);
  Array kernels = values({3, 3, 3, 2, 4}, 3);
  Array each = vmap(conv1)(images, kernels);
  for (int64_t i = 0; i < 3; ++i) expect_same_values(row(each, i), conv1(row(images, i), row(kernels, i)), 1e-5, 1e-6);
}

TEST(VmapTest, ErrorsNameWhatWasExpected) {
  auto f = [](const Array& a, const Array& b) { return a + sum(b); };
  Array a = values({3, 2}, 1), b = values({4}, 2);
  EXPECT_THAT(error_of([&] { vmap(f)(a, b); }),
              HasSubstr("[vmap] mapped axes have different sizes: argument 0 (leaf 0, f32[3,2]) has 3 along axis 0, "
                        "argument 1 (leaf 1, f32[4]) has 4 along axis 0"));
  EXPECT_THAT(error_of([&] { vmap(f, {.in_axes = {0}})(a, b); }), HasSubstr("[vmap] in_axes has 1 entries for 2 arguments"));
  EXPECT_THAT(error_of([&] { vmap(f, {.in_axes = {2, std::nullopt}})(a, b); }),
              HasSubstr("[vmap] argument 0 (leaf 0, f32[3,2]) cannot be mapped over axis 2: its rank is 2"));
  EXPECT_THAT(error_of([&] { vmap(f, {.in_axes = {std::nullopt, std::nullopt}})(a, b); }),
              HasSubstr("[vmap] no argument is mapped"));
  auto g = [](const Array& x, int k) { return x * static_cast<float>(k); };
  EXPECT_THAT(error_of([&] { vmap(g, {.in_axes = {0, 0}})(a, 2); }),
              HasSubstr("[vmap] argument 1 is a static value; its in_axes entry must be std::nullopt"));
  EXPECT_THAT(error_of([&] { vmap([](const Array& x) { return sum(x); }, {.out_axes = 1})(b); }),
              HasSubstr("[vmap] out_axes 1 is outside the output f32[4]"));
}

}  // namespace
}  // namespace mcx
