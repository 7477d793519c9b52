#include <cmath>

#include "gmock/gmock.h"
#include "mcx/ir/text.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;

// Central finite differences of a scalar function of one leaf, in f64.
template <typename F>
std::vector<double> finite_diff(const F& f, const Array& x, double eps = 1e-6) {
  std::vector<double> v = x.to_host().to_doubles();
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<double> p = v, m = v;
    p[i] += eps;
    m[i] -= eps;
    double fp = f(array(p, x.dims())).template item<double>();
    double fm = f(array(m, x.dims())).template item<double>();
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

Array randn_like_values(std::vector<int64_t> dims, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(1.7 * (i + 1) * (seed + 1)) * 0.8;
  return array(v, dims);
}

// A 2-layer MLP with softmax cross-entropy, in f64 so finite differences are accurate.
Array mlp_loss(const Tree& p, const Array& x, const Array& labels) {
  Array h = tanh(matmul(x, p.at("w1")) + p.at("b1").array());
  Array logits = matmul(h, p.at("w2")) + p.at("b2").array();
  return -mean(take_along_last(log_softmax(logits), labels));
}

TEST(GradTest, MlpLossMatchesFiniteDifferences) {
  Tree params = Tree::Dict{{"w1", randn_like_values({4, 5}, 1)},
                           {"b1", randn_like_values({5}, 2)},
                           {"w2", randn_like_values({5, 3}, 3)},
                           {"b2", randn_like_values({3}, 4)}};
  Array x = randn_like_values({6, 4}, 5);
  Array labels = array({0, 2, 1, 1, 0, 2});
  Tree g = grad(mlp_loss)(params, x, labels);
  for (const std::string name : {"w1", "b1", "w2", "b2"}) {
    SCOPED_TRACE(name);
    auto f = [&](const Array& leaf) {
      Tree q = params;
      q[name] = leaf;
      return mlp_loss(q, x, labels);
    };
    expect_allclose(g.at(name), finite_diff(f, params.at(name)), 1e-5, 1e-7);
  }
  // value_and_grad under jit: one compiled program, same numbers.
  auto step = jit(value_and_grad(mlp_loss), {.name = "step"});
  auto [loss, g2] = step(params, x, labels);
  testing_util::expect_same_values(loss, mlp_loss(params, x, labels), 1e-12, 1e-12);
  for (const std::string name : {"w1", "b1", "w2", "b2"}) testing_util::expect_same_values(g2.at(name), g.at(name), 1e-12, 1e-12);
  EXPECT_EQ(step.cache_size(), 1);
  step(params, x, labels);
  EXPECT_EQ(step.cache_stats().hits, 1);
}

TEST(GradTest, SeveralArgnumsGiveTuple) {
  auto f = [](const Array& a, const Array& b, const Array& c) { return sum(a * b * b + c); };
  Array a = array<double>({1, 2}, {2}), b = array<double>({3, 4}, {2}), c = array<double>({5, 6}, {2});
  auto [ga, gc] = grad(f, argnums<0, 2>)(a, b, c);
  expect_allclose(ga, {9, 16});
  expect_allclose(gc, {1, 1});
  auto [v, gb] = value_and_grad(f, argnums<1>)(a, b, c);
  expect_allclose(v, {1 * 9 + 2 * 16 + 5 + 6});
  expect_allclose(gb, {6, 16});
}

TEST(GradTest, GradOfGrad) {
  auto f = [](const Array& x) { return sum(x * x * x); };  // f'' = 6x
  auto d2 = grad([&](const Array& x) { return sum(grad(f)(x)); });
  Array x = array<double>({1, -2, 0.5}, {3});
  expect_allclose(d2(x), {6, -12, 3});
  auto sin3 = grad(grad(grad([](const Array& s) { return sin(s); })));
  expect_allclose(sin3(array(0.7)), {-std::cos(0.7)});
  // And jitted: the whole second derivative is one program.
  auto jd2 = jit(d2);
  expect_allclose(jd2(x), {6, -12, 3});
}

TEST(GradTest, ClosureOverOuterTracer) {
  // d/dy [ d/dx (x*y)^2 at x ] = d/dy [2 x y^2] = 4 x y.
  auto outer = [](const Array& x, const Array& y) {
    auto inner = [&](const Array& xx) { return sum(square(xx * y)); };
    return sum(grad(inner)(x));
  };
  Array x = array(1.5), y = array(2.0);
  expect_allclose(grad(outer, argnums<1>)(x, y), {4 * 1.5 * 2.0});
  expect_allclose(jit(grad(outer, argnums<1>))(x, y), {4 * 1.5 * 2.0});
}

TEST(GradTest, VjpOfPytreeOutputs) {
  auto f = [](const Array& a, const Array& b) { return std::make_pair(a * b, sum(exp(a))); };
  Array a = array<float>({0.5, 1.0}, {2}), b = array<float>({2, 3}, {2});
  auto [out, pullback] = vjp(f, a, b);
  expect_allclose(out.first, {1.0, 3.0});
  auto [ga, gb] = pullback(std::make_pair(array<float>({1, 10}, {2}), array(2.0f)));
  expect_allclose(ga, {2 * 1 + 2 * std::exp(0.5), 3 * 10 + 2 * std::exp(1.0)});
  expect_allclose(gb, {0.5, 10.0});
  EXPECT_THAT(error_of([&] { pullback(std::make_pair(ones({3}), array(1.0f))); }),
              HasSubstr("[vjp] cotangent 0 must have the output's type f32[2]; found f32[3]"));
}

TEST(GradTest, StopGradientAndStableLogsumexp) {
  Array x = array<double>({1000, 1001, 999}, {3});
  Array g = grad([](const Array& v) { return logsumexp(v); })(x);
  std::vector<double> sm{std::exp(-1.0), 1.0, std::exp(-2.0)};
  double z = sm[0] + sm[1] + sm[2];
  expect_allclose(g, {sm[0] / z, sm[1] / z, sm[2] / z}, 1e-9, 1e-12);
  expect_allclose(grad([](const Array& v) { return sum(stop_gradient(v) * v); })(x), {1000, 1001, 999});
}

TEST(GradTest, ErrorsForNonScalarAndIntegerInputs) {
  EXPECT_THAT(error_of([] { grad([](const Array& v) { return v * 2.0; })(ones({3})); }),
              HasSubstr("[grad] the function must return a scalar floating array; found f32[3]"));
  EXPECT_THAT(error_of([] { grad([](const Array& v) { return sum(astype(v, DType::kFloat32)); })(array({1, 2})); }),
              HasSubstr("[grad] argument 0 (leaf 0, i32[2]) has dtype int32"));
  // The program of a gradient prints like any other.
  ir::Program p = trace(grad([](const Array& v) { return sum(tanh(v)); }),
                        AbstractValue{DType::kFloat32, symbolic_shape("n")});
  EXPECT_THAT(ir::print_program(p), HasSubstr("f32[n]"));
}

}  // namespace
}  // namespace mcx
