// custom_vjp and custom_jvp (jax.custom_vjp / jax.custom_jvp): the value is fun's, eagerly and under jit;
// the derivatives are the rule's (checked with rules that differ from fun's derivative, and against closed
// forms in double precision), under grad, vjp, jit, vmap (against a loop of single calls), forward mode and
// second order, on a mesh, through pytrees; and the errors a user meets.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "mcx/ir/op.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;
using testing_util::expect_same_values;
using testing_util::random_array;

Array f32_vector(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Array(Buffer::from_vector<float>(std::move(v), {n}));
}

int count_ops(const ir::Program& p, ir::OpKind kind) {
  int n = 0;
  for (const ir::Instr& in : p.instrs) n += in.kind == kind;
  return n;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// log(1 + exp(x)), whose autodiff gradient exp(x) / (1 + exp(x)) is inf / inf = NaN for large x in f32.
Array softplus_naive(const Array& x) { return log1p(exp(x)); }

auto stable_softplus_vjp() {
  return custom_vjp([](const Array& x) { return softplus_naive(x); },
                    [](const Array& x) { return std::pair{softplus_naive(x), x}; },
                    [](const Array& x, const Array& g) { return g * sigmoid(x); });
}

auto stable_softplus_jvp() {
  return custom_jvp([](const Array& x) { return softplus_naive(x); },
                    [](const std::tuple<Array>& primals, const std::tuple<Array>& tangents) {
                      const Array& x = std::get<0>(primals);
                      return std::pair{softplus_naive(x), std::get<0>(tangents) * sigmoid(x)};
                    });
}

const std::vector<float> kPoints = {-3.0f, 0.0f, 2.5f, 100.0f};

std::vector<double> sigmoids(const std::vector<float>& xs) {
  std::vector<double> out;
  for (float x : xs) out.push_back(sigmoid_d(x));
  return out;
}

TEST(CustomVjpTest, TheValueIsFunsEagerlyAndUnderJit) {
  auto softplus = stable_softplus_vjp();
  Array x = random_array({5}, 1);
  expect_same_values(softplus(x), softplus_naive(x), 0, 0, "eager");
  expect_same_values(jit(softplus)(x), softplus_naive(x), 1e-6, 1e-6, "jit");
  // Under jit the call is one op carrying the rule; the compiled program runs fun inlined.
  ir::Program p = trace(softplus, x);
  EXPECT_EQ(count_ops(p, ir::OpKind::kCustomVjpCall), 1);
}

TEST(CustomVjpTest, StableGradientWhereAutodiffOfFunGivesNaN) {
  auto softplus = stable_softplus_vjp();
  auto loss = [&](const Array& x) { return sum(softplus(x), {0}); };
  Array x = f32_vector(kPoints);
  EXPECT_TRUE(std::isnan(grad([](const Array& v) { return sum(softplus_naive(v), {0}); })(x).to_vector<float>()[3]));
  const std::vector<double> want = sigmoids(kPoints);
  expect_allclose(grad(loss)(x), want, 1e-6, 1e-7);
  expect_allclose(jit(grad(loss))(x), want, 1e-6, 1e-7);
  expect_allclose(grad(jit(loss))(x), want, 1e-6, 1e-7);
  auto [value, pullback] = vjp(softplus, x);
  EXPECT_EQ(value.to_vector<float>(), softplus_naive(x).to_vector<float>());  // inf at 100, as fun
  expect_allclose(pullback(ones_like(x) * 2.0f), {2 * want[0], 2 * want[1], 2 * want[2], 2 * want[3]}, 1e-6, 1e-7);
}

TEST(CustomVjpTest, TheRuleIsUsedNotFunsDerivative) {
  // Gradient clipping: the identity whose backward pass clips the cotangent to [-1, 1].
  auto clip_gradient = custom_vjp([](const Array& x) { return x; },
                                  [](const Array& x) { return std::pair{x, std::vector<Array>{}}; },
                                  [](const std::vector<Array>&, const Array& g) { return clip(g, Array(-1.0f), Array(1.0f)); });
  auto loss = [&](const Array& x) { return sum(clip_gradient(x) * f32_vector({10.0f, 0.5f, -3.0f}), {0}); };
  Array x = f32_vector({1.0f, 2.0f, 3.0f});
  expect_allclose(grad(loss)(x), {1.0, 0.5, -1.0});
  auto [value, g] = value_and_grad(loss)(x);
  EXPECT_FLOAT_EQ(value.item<float>(), 10.0f + 1.0f - 9.0f);
  expect_allclose(g, {1.0, 0.5, -1.0});
}

TEST(CustomVjpTest, PytreeArgumentsResidualsAndOutputs) {
  // f((a, b), c) = (a * b, {"s": sin(c)}) with its true derivative as the rule: equals plain autodiff.
  using Pair = std::pair<Array, Array>;
  using Out = std::pair<Array, std::map<std::string, Array>>;
  auto plain = [](const Pair& ab, const Array& c) {
    return Out{ab.first * ab.second, {{"s", sin(c)}}};
  };
  auto f = custom_vjp(plain,
                      [&](const Pair& ab, const Array& c) { return std::pair{plain(ab, c), std::tuple{ab.first, ab.second, c}}; },
                      [](const std::tuple<Array, Array, Array>& res, const Out& ct) {
                        const auto& [a, b, c] = res;
                        return std::tuple{Pair{ct.first * b, ct.first * a}, ct.second.at("s") * cos(c)};
                      });
  auto loss = [](auto&& fn) {
    return [fn](const Pair& ab, const Array& c) {
      Out o = fn(ab, c);
      return sum(o.first * o.first, {0}) + sum(o.second.at("s"), {0});
    };
  };
  Pair ab{random_array({4}, 2), random_array({4}, 3)};
  Array c = random_array({4}, 4);
  auto got = grad(loss(f), argnums<0, 1>)(ab, c);
  auto want = grad(loss(plain), argnums<0, 1>)(ab, c);
  expect_same_values(std::get<0>(got).first, std::get<0>(want).first, 1e-6, 1e-6, "d/da");
  expect_same_values(std::get<0>(got).second, std::get<0>(want).second, 1e-6, 1e-6, "d/db");
  expect_same_values(std::get<1>(got), std::get<1>(want), 1e-6, 1e-6, "d/dc");
}

TEST(CustomVjpTest, VmapOfGradAndGradOfVmapMatchALoop) {
  auto softplus = stable_softplus_vjp();
  auto per_example = [&](const Array& w, const Array& x) { return sum(softplus(x * w), {0}); };
  Array w = random_array({3}, 5);
  Array xs = random_array({4, 3}, 6);
  Array batched = vmap(grad(per_example), {.in_axes = {std::nullopt, 0}})(w, xs);
  for (int64_t i = 0; i < 4; ++i) {
    Array xi = take(xs, Array(Buffer::scalar<int32_t>(static_cast<int32_t>(i))));
    expect_same_values(take(batched, Array(Buffer::scalar<int32_t>(static_cast<int32_t>(i)))),
                       grad(per_example)(w, xi), 1e-6, 1e-7, "example " + std::to_string(i));
  }
  // grad of a vmapped loss: the vmapped rule (fwd and bwd batched) gives the summed per-example gradients.
  auto total = [&](const Array& w) { return sum(vmap(per_example, {.in_axes = {std::nullopt, 0}})(w, xs), {0}); };
  expect_same_values(grad(total)(w), sum(batched, {0}), 1e-5, 1e-6, "grad of vmap");
}

TEST(CustomVjpTest, RunsPartitionedOnAMesh) {
  Mesh mesh = make_mesh({4}, {"data"});
  auto softplus = stable_softplus_vjp();
  auto loss = [&](const Array& w, const Array& x) { return mean(softplus(matmul(x, w))); };
  Array w = random_array({3, 2}, 7), x = random_array({8, 3}, 8);
  Array want = jit(grad(loss))(w, x);
  auto step = jit(grad(loss), {.name = "custom_step",
                               .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))},
                               .out_shardings = {NamedSharding(mesh, P())}});
  expect_same_values(step(w, x), want, 1e-5, 1e-6, "4 devices");
}

TEST(CustomVjpTest, ForwardModeIsRefusedAsInJax) {
  auto softplus = stable_softplus_vjp();
  EXPECT_THAT(error_of([&] { jvp(softplus, std::tuple{f32_vector({1.0f})}, std::tuple{f32_vector({1.0f})}); }),
              HasSubstr("can't apply forward-mode autodiff (jvp) to a custom_vjp function"));
}

TEST(CustomVjpTest, DifferentiatingAClosedOverArrayIsAnError) {
  Array x = random_array({3}, 9);
  auto loss = [&](const Array& w) {
    auto scaled = custom_vjp([&](const Array& v) { return v * w; },
                             [&](const Array& v) { return std::pair{v * w, v}; },
                             [&](const Array&, const Array& g) { return g * w; });
    return sum(scaled(x), {0});
  };
  EXPECT_THAT(error_of([&] { grad(loss)(random_array({3}, 10)); }),
              HasSubstr("[custom_vjp] fun closes over an array (its constant 0) that is being differentiated in "
                        "reverse mode"));
  // Closing over an array that is not differentiated is fine.
  auto by_x = [&](const Array& w) {
    auto scaled = custom_vjp([&](const Array& v) { return v * x; },
                             [&](const Array& v) { return std::pair{v * x, std::vector<Array>{}}; },
                             [&](const std::vector<Array>&, const Array& g) { return g * x; });
    return sum(scaled(w), {0});
  };
  expect_same_values(grad(by_x)(random_array({3}, 11)), x, 0, 0, "closure over data");
}

TEST(CustomVjpTest, ErrorsNameTheMismatch) {
  Array x = f32_vector({1.0f, 2.0f});
  auto wrong_fwd = custom_vjp([](const Array& v) { return v; },
                              [](const Array& v) { return std::pair{astype(v, DType::kFloat64), v}; },
                              [](const Array&, const Array& g) { return g; });
  EXPECT_THAT(error_of([&] { jit(wrong_fwd)(x); }),
              HasSubstr("[custom_vjp] fwd returns output leaf (the whole value) as f64[2], fun has f32[2]"));
  auto wrong_count = custom_vjp([](const Array& a, const Array& b) { return a * b; },
                                [](const Array& a, const Array& b) { return std::pair{a * b, std::pair{a, b}}; },
                                [](const std::pair<Array, Array>& r, const Array& g) { return g * r.second; });
  EXPECT_THAT(error_of([&] { jit(wrong_count)(x, x); }),
              HasSubstr("[custom_vjp] bwd returns cotangents of structure *, expected one per argument: tuple(*, *)"));
  auto wrong_type = custom_vjp([](const Array& v) { return sum(v, {0}); },
                               [](const Array& v) { return std::pair{sum(v, {0}), v}; },
                               [](const Array&, const Array& g) { return g; });
  EXPECT_THAT(error_of([&] { jit(wrong_type)(x); }),
              HasSubstr("[custom_vjp] bwd returns cotangent leaf [0] as f32[], the argument has f32[2]"));
}

TEST(CustomJvpTest, BothModesUseTheRule) {
  // sin with a deliberately different derivative (2): forward mode, reverse mode (the transposed rule),
  // jacfwd and jacrev all see 2, not cos.
  auto f = custom_jvp([](const Array& x) { return sin(x); },
                      [](const std::tuple<Array>& p, const std::tuple<Array>& t) {
                        return std::pair{sin(std::get<0>(p)), std::get<0>(t) * 2.0f};
                      });
  Array x = f32_vector({0.3f, -1.0f});
  auto [y, y_dot] = jvp(f, std::tuple{x}, std::tuple{f32_vector({1.0f, 3.0f})});
  expect_same_values(y, sin(x), 0, 0, "primal");
  expect_allclose(y_dot, {2.0, 6.0});
  expect_allclose(grad([&](const Array& v) { return sum(f(v), {0}); })(x), {2.0, 2.0});
  expect_allclose(jacfwd(f)(x), {2, 0, 0, 2});
  expect_allclose(jacrev(f)(x), {2, 0, 0, 2});
  expect_same_values(jit(f)(x), sin(x), 1e-6, 1e-6, "jit value");
}

TEST(CustomJvpTest, StableSoftplusFirstAndSecondOrder) {
  auto softplus = stable_softplus_jvp();
  auto loss = [&](const Array& x) { return sum(softplus(x), {0}); };
  Array x = f32_vector(kPoints);
  const std::vector<double> s = sigmoids(kPoints);
  expect_allclose(grad(loss)(x), s, 1e-6, 1e-7);
  expect_allclose(jit(grad(loss))(x), s, 1e-6, 1e-7);
  auto [y, y_dot] = jvp(softplus, std::tuple{x}, std::tuple{ones_like(x)});
  expect_allclose(y_dot, s, 1e-6, 1e-7);
  // The transposed rule is ordinary ops, so it differentiates again: the Hessian is diag(s (1 - s)).
  std::vector<double> h(16, 0.0);
  for (int i = 0; i < 4; ++i) h[i * 4 + i] = s[i] * (1 - s[i]);
  expect_allclose(hessian(loss)(x), h, 1e-5, 1e-7);
}

TEST(CustomJvpTest, TwoArgumentsUnderVmapAndJit) {
  // f(x, y) = x * y with the product rule: per-example gradients by vmap equal a loop.
  auto mul = custom_jvp([](const Array& a, const Array& b) { return a * b; },
                        [](const std::tuple<Array, Array>& p, const std::tuple<Array, Array>& t) {
                          const auto& [a, b] = p;
                          const auto& [ta, tb] = t;
                          return std::pair{a * b, ta * b + a * tb};
                        });
  auto loss = [&](const Array& w, const Array& x) { return sum(mul(w, x) * mul(w, x), {0}); };
  Array w = random_array({3}, 12), xs = random_array({5, 3}, 13);
  Array batched = jit(vmap(grad(loss), {.in_axes = {std::nullopt, 0}}))(w, xs);
  for (int64_t i = 0; i < 5; ++i) {
    const Array idx(Buffer::scalar<int32_t>(static_cast<int32_t>(i)));
    Array xi = take(xs, idx);
    expect_same_values(take(batched, idx), 2.0f * w * xi * xi, 1e-5, 1e-6, "example " + std::to_string(i));
  }
}

TEST(CustomJvpTest, ErrorsNameTheMismatch) {
  auto wrong = custom_jvp([](const Array& x) { return x; },
                          [](const std::tuple<Array>& p, const std::tuple<Array>& t) {
                            return std::pair{std::get<0>(p), sum(std::get<0>(t), {0})};
                          });
  EXPECT_THAT(error_of([&] { jit(wrong)(f32_vector({1.0f, 2.0f})); }),
              HasSubstr("[custom_jvp] jvp returns tangent leaf (the whole value) as f32[], fun has f32[2]"));
}

}  // namespace
}  // namespace mcx
