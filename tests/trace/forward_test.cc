// Forward mode and Jacobians at the API: jvp, linearize, jacfwd, jacrev, hessian against closed forms,
// finite differences (f64) and each other; composition with jit and grad; the errors.
#include <cmath>

#include "gmock/gmock.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;
using testing_util::expect_same_values;

Array values(std::vector<int64_t> dims, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(1.3 * static_cast<double>(i + 1) * (seed + 1)) * 0.9;
  return array(v, dims);
}

// f(x) = sin(x) * x; f'(x) = cos(x) * x + sin(x).
Array sin_times_x(const Array& x) { return sin(x) * x; }

TEST(JvpTest, ElementwiseMatchesTheClosedForm) {
  Array x = values({2, 3}, 1), t = values({2, 3}, 2);
  auto [y, y_dot] = jvp(sin_times_x, std::tuple{x}, std::tuple{t});
  std::vector<double> xs = x.to_vector<double>(), ts = t.to_vector<double>();
  std::vector<double> want_y, want_dot;
  for (size_t i = 0; i < xs.size(); ++i) {
    want_y.push_back(std::sin(xs[i]) * xs[i]);
    want_dot.push_back((std::cos(xs[i]) * xs[i] + std::sin(xs[i])) * ts[i]);
  }
  expect_allclose(y, want_y, 1e-14, 1e-15);
  expect_allclose(y_dot, want_dot, 1e-13, 1e-15);
}

// A two-layer network over a dict of parameters, returning a pytree (a pair).
std::pair<Array, Array> network(const Tree& p, const Array& x) {
  Array h = tanh(matmul(x, p.at("w")) + p.at("b").array());
  return {softmax(h), sum(h * h)};
}

Tree params(int seed) { return Tree::Dict{{"w", values({3, 4}, seed)}, {"b", values({4}, seed + 1)}}; }

TEST(JvpTest, PytreesMatchCentralFiniteDifferences) {
  Tree p = params(1), tp = params(7);
  Array x = values({5, 3}, 3), tx = values({5, 3}, 4);
  auto [out, out_dot] = jvp(network, std::tuple{p, x}, std::tuple{tp, tx});
  const double h = 1e-6;
  auto moved = [&](double s) {
    Tree q = Tree::Dict{{"w", p.at("w").array() + s * tp.at("w").array()},
                        {"b", p.at("b").array() + s * tp.at("b").array()}};
    return network(q, x + s * tx);
  };
  auto [plus_a, plus_b] = moved(h);
  auto [minus_a, minus_b] = moved(-h);
  expect_same_values(out.first, network(p, x).first, 0, 0, "primal output");
  expect_allclose(out_dot.first, ((plus_a - minus_a) / (2 * h)).to_vector<double>(), 1e-6, 1e-9, "softmax tangent");
  expect_allclose(out_dot.second, ((plus_b - minus_b) / (2 * h)).to_vector<double>(), 1e-6, 1e-9, "sum tangent");
}

TEST(JvpTest, UnderJitIsOneProgramWithTheSameValues) {
  Array x = values({4}, 1), t = values({4}, 2);
  auto eager = jvp(sin_times_x, std::tuple{x}, std::tuple{t});
  auto jitted = jit([](const Array& a, const Array& b) {
    auto [y, y_dot] = jvp(sin_times_x, std::tuple{a}, std::tuple{b});
    return std::pair<Array, Array>(y, y_dot);
  })(x, t);
  expect_same_values(jitted.first, eager.first, 1e-15, 0);
  expect_same_values(jitted.second, eager.second, 1e-15, 0);
}

TEST(LinearizeTest, EvaluatesTheLinearPartPerTangent) {
  Tree p = params(2);
  Array x = values({5, 3}, 5);
  auto [out, f_lin] = linearize(network, p, x);
  expect_same_values(out.first, network(p, x).first, 0, 0);
  for (int seed : {3, 11}) {
    Tree tp = params(seed);
    Array tx = values({5, 3}, seed + 2);
    auto [want, want_dot] = jvp(network, std::tuple{p, x}, std::tuple{tp, tx});
    std::pair<Array, Array> got = f_lin(tp, tx);
    expect_same_values(got.first, want_dot.first, 1e-14, 1e-16, "softmax tangent");
    expect_same_values(got.second, want_dot.second, 1e-14, 1e-16, "sum tangent");
  }
  // Linear: f_lin(2 t) = 2 f_lin(t).
  Tree tp = params(4);
  Array tx = values({5, 3}, 9);
  Tree tp2 = Tree::Dict{{"w", 2.0 * tp.at("w").array()}, {"b", 2.0 * tp.at("b").array()}};
  expect_same_values(f_lin(tp2, 2.0 * tx).second, 2.0 * f_lin(tp, tx).second, 1e-13, 1e-15);
}

// f(x) = A tanh(x) for a fixed A: J = A diag(1 - tanh(x)^2).
TEST(JacobianTest, ForwardAndReverseMatchTheClosedForm) {
  Array a = values({2, 3}, 4);
  Array x = values({3}, 5);
  auto f = [&](const Array& v) { return matmul(a, tanh(v)); };
  Array jf = jacfwd(f)(x);
  Array jr = jacrev(f)(x);
  EXPECT_EQ(jf.dims(), (std::vector<int64_t>{2, 3}));
  std::vector<double> av = a.to_vector<double>(), xv = x.to_vector<double>(), want;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) want.push_back(av[i * 3 + j] * (1 - std::tanh(xv[j]) * std::tanh(xv[j])));
  }
  expect_allclose(jf, want, 1e-14, 1e-15);
  expect_allclose(jr, want, 1e-14, 1e-15);
}

TEST(JacobianTest, ShapesAreOutputThenInputAndArgnumsPicksTheArgument) {
  auto f = [](const Array& w, const Array& x) { return matmul(x, w); };  // [4,3] x [3,2] -> [4,2]
  Array w = values({3, 2}, 1), x = values({4, 3}, 2);
  Array dw = jacrev(f)(w, x);
  Array dx = jacfwd(f, argnums<1>)(w, x);
  EXPECT_EQ(dw.dims(), (std::vector<int64_t>{4, 2, 3, 2}));
  EXPECT_EQ(dx.dims(), (std::vector<int64_t>{4, 2, 4, 3}));
  // d(x w)[i,j] / d w[k,l] = x[i,k] [j == l]; d(x w)[i,j] / d x[k,l] = [i == k] w[l,j].
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(), want_w, want_x;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      for (int k = 0; k < 3; ++k)
        for (int l = 0; l < 2; ++l) want_w.push_back(j == l ? xv[i * 3 + k] : 0.0);
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 3; ++l) want_x.push_back(i == k ? wv[l * 2 + j] : 0.0);
    }
  expect_allclose(dw, want_w, 1e-15, 0);
  expect_allclose(dx, want_x, 1e-15, 0);
  expect_same_values(jacfwd(f)(w, x), dw, 1e-15, 0);
}

// f(x) = sum(x^3) + x0 * x1: H = diag(6 x) + the symmetric off-diagonal pair.
TEST(JacobianTest, HessianMatchesTheClosedFormAndIsSymmetric) {
  auto element = [](const Array& x, int64_t i) {
    return reshape(slice(x, concrete_shape({i}), concrete_shape({i + 1})), concrete_shape({}));
  };
  auto f = [&](const Array& x) { return sum(x * x * x) + element(x, 0) * element(x, 1); };
  Array x = values({3}, 2);
  Array h = hessian(f)(x);
  std::vector<double> xv = x.to_vector<double>();
  std::vector<double> want(9, 0.0);
  for (int i = 0; i < 3; ++i) want[i * 3 + i] = 6 * xv[i];
  want[1] = want[3] = 1.0;
  expect_allclose(h, want, 1e-13, 1e-14);
}

TEST(JacobianTest, HessianVectorProductByForwardOverReverse) {
  // jvp of grad gives H v without forming H; it must agree with hessian(f) v.
  auto f = [](const Array& x) { return sum(exp(x) * sin(x)); };
  Array x = values({4}, 3), v = values({4}, 6);
  auto [g, hv] = jvp(grad(f), std::tuple{x}, std::tuple{v});
  Array h = hessian(f)(x);
  expect_same_values(hv, matmul(h, v), 1e-13, 1e-14);
  expect_same_values(g, grad(f)(x), 1e-15, 0);
}

TEST(JacobianTest, ReverseOverForwardAndUnderJit) {
  // grad of a function that calls jvp (reverse over forward), and a Jacobian inside jit.
  auto f = [](const Array& x) { return sum(tanh(x) * x); };
  Array x = values({3}, 1), v = values({3}, 2);
  auto directional = [&](const Array& y) { return jvp(f, std::tuple{y}, std::tuple{v}).second; };
  Array g = grad(directional)(x);  // d/dy (grad f(y) . v) = H v
  expect_same_values(g, matmul(hessian(f)(x), v), 1e-13, 1e-14);
  Array jitted = jit([&](const Array& y) { return jacfwd(grad(f))(y); })(x);
  expect_same_values(jitted, hessian(f)(x), 1e-14, 1e-15);
}

// Pytree arguments and results, several argnums: every block equals the Jacobian of the function of that
// one leaf (the Array form, checked above against closed forms), by both modes.
TEST(JacobianTest, PytreesAndSeveralArgnumsNestOutputThenArgument) {
  Tree params{{"w", Tree(values({3, 2}, 1))}, {"b", Tree(values({2}, 2))}};
  Array x = values({4, 3}, 3);
  auto layer = [](const Tree& p, const Array& xx) { return tanh(matmul(xx, p.at("w")) + p.at("b")); };
  for (bool forward : {false, true}) {
    SCOPED_TRACE(forward ? "jacfwd" : "jacrev");
    Tree j = forward ? jacfwd(layer)(params, x) : jacrev(layer)(params, x);
    ASSERT_TRUE(j.is_dict());
    Array jw = jacrev([&](const Array& w) { return layer(Tree{{"w", Tree(w)}, {"b", params.at("b")}}, x); })(
        params.at("w").array());
    Array jb = jacrev([&](const Array& b) { return layer(Tree{{"w", params.at("w")}, {"b", Tree(b)}}, x); })(
        params.at("b").array());
    EXPECT_EQ(j.at("w").array().dims(), (std::vector<int64_t>{4, 2, 3, 2}));
    expect_same_values(j.at("w").array(), jw, 1e-12, 1e-14);
    expect_same_values(j.at("b").array(), jb, 1e-12, 1e-14);
  }
  // Two argnums and a tuple result: out leaf -> list over argnums.
  auto g = [](const Array& a, const Array& b) { return std::make_tuple(a * b, sum(a)); };
  Array a = values({3}, 4), b = values({3}, 5);
  Tree j = jacrev(g, argnums<0, 1>)(a, b);
  ASSERT_TRUE(j.is_list());
  ASSERT_EQ(j.list().size(), 2u);
  const Tree& d_prod = j.at(0);
  const Tree& d_sum = j.at(1);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), diag_a, diag_b;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      diag_b.push_back(r == c ? bv[r] : 0.0);
      diag_a.push_back(r == c ? av[r] : 0.0);
    }
  expect_allclose(d_prod.at(0).array(), diag_b, 1e-15, 0);  // d(a*b)/da = diag(b)
  expect_allclose(d_prod.at(1).array(), diag_a, 1e-15, 0);
  expect_allclose(d_sum.at(0).array(), {1, 1, 1}, 1e-15, 0);
  expect_allclose(d_sum.at(1).array(), {0, 0, 0}, 1e-15, 0);
  Tree jf = jacfwd(g, argnums<0, 1>)(a, b);
  expect_same_values(jf.at(0).at(1).array(), d_prod.at(1).array(), 1e-15, 0);
  EXPECT_THAT(error_of([&] { (void)jacrev(g, argnums<0, 1>)(a, astype(b, DType::kFloat32)); }),
              HasSubstr("[jacrev] every argument leaf must have one floating dtype"));
}

TEST(ForwardErrorsTest, NameWhatWasExpected) {
  Array x = values({3}, 1);
  EXPECT_THAT(error_of([&] { jvp(sin_times_x, std::tuple{x}, std::tuple{values({4}, 2)}); }),
              HasSubstr("[jvp] tangent 0 must have its primal's type f64[3]; found f64[4]"));
  EXPECT_THAT(error_of([&] { jvp(sin_times_x, std::tuple{x}, std::tuple{astype(x, DType::kFloat32)}); }),
              HasSubstr("found f32[3]"));
  EXPECT_THAT(error_of([&] { jvp([](const Array& a) { return a * 2; }, std::tuple{array({1, 2})}, std::tuple{array({1, 1})}); }),
              HasSubstr("differentiation needs floating inputs"));
  auto [y, f_lin] = linearize(sin_times_x, x);
  EXPECT_THAT(error_of([&] { f_lin(values({2}, 1)); }), HasSubstr("[linearize] tangent 0 must have its primal's type f64[3]"));
  EXPECT_THAT(error_of([&] { jacfwd([](const Array& a) { return astype(a, DType::kInt32); })(x); }),
              HasSubstr("[jacfwd] the function's output has dtype int32; a Jacobian needs a floating output"));
  EXPECT_THAT(error_of([&] { jacrev(sin_times_x)(array({1, 2})); }),
              HasSubstr("[jacrev] argument 0 (leaf 0, i32[2]) has dtype int32; differentiation needs floating inputs"));
}

}  // namespace
}  // namespace mcx
