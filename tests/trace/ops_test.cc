#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "gmock/gmock.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;

Array sample(std::vector<int64_t> dims, double lo, double hi) {
  int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(lo + (hi - lo) * ((i * 7919) % 97) / 96.0);
  return array(v, dims);
}

struct UnaryCase {
  std::string name;
  std::function<Array(const Array&)> f;
  double lo, hi;
};

// Every op runs eagerly, under jit and through the reference evaluator on the traced program; all three
// must agree.
TEST(OpsTest, EagerJitAndReferenceAgree) {
  std::vector<UnaryCase> cases = {
      {"neg", [](const Array& x) { return -x; }, -3, 3},
      {"abs", [](const Array& x) { return abs(x); }, -3, 3},
      {"sign", [](const Array& x) { return sign(x); }, -3, 3},
      {"exp", [](const Array& x) { return exp(x); }, -3, 3},
      {"log", [](const Array& x) { return log(x); }, 0.1, 5},
      {"log1p", [](const Array& x) { return log1p(x); }, 0, 5},
      {"expm1", [](const Array& x) { return expm1(x); }, -1, 1},
      {"tanh", [](const Array& x) { return tanh(x); }, -3, 3},
      {"sigmoid", [](const Array& x) { return sigmoid(x); }, -3, 3},
      {"sqrt", [](const Array& x) { return sqrt(x); }, 0, 9},
      {"rsqrt", [](const Array& x) { return rsqrt(x); }, 0.5, 9},
      {"floor", [](const Array& x) { return floor(x); }, -3, 3},
      {"ceil", [](const Array& x) { return ceil(x); }, -3, 3},
      {"round", [](const Array& x) { return round(x); }, -3, 3},
      {"sin", [](const Array& x) { return sin(x); }, -3, 3},
      {"cos", [](const Array& x) { return cos(x); }, -3, 3},
      {"erf", [](const Array& x) { return erf(x); }, -3, 3},
      {"erfc", [](const Array& x) { return erfc(x); }, -3, 6},
      {"erf_inv", [](const Array& x) { return erf_inv(x); }, -0.999, 0.999},
      {"square", [](const Array& x) { return square(x); }, -3, 3},
      {"relu", [](const Array& x) { return relu(x); }, -3, 3},
      {"gelu_tanh", [](const Array& x) { return gelu(x, true); }, -3, 3},
      {"gelu_erf", [](const Array& x) { return gelu(x, false); }, -3, 3},
      {"affine", [](const Array& x) { return x * 2.0 + 1; }, -3, 3},
      {"pow", [](const Array& x) { return power(x, 2.5); }, 0.5, 3},
      {"rem", [](const Array& x) { return remainder(x, 1.5); }, -3, 3},
      {"where", [](const Array& x) { return where(x > 0, x, x * 0.1); }, -3, 3},
      {"clip", [](const Array& x) { return clip(x, -1, 1); }, -3, 3},
      {"max_min", [](const Array& x) { return maximum(minimum(x, 2.0), -2.0); }, -3, 3},
      {"sum_all", [](const Array& x) { return sum(x); }, -3, 3},
      {"sum_axis", [](const Array& x) { return sum(x, 1, true); }, -3, 3},
      {"max_axis", [](const Array& x) { return max(x, 0); }, -3, 3},
      {"min_axis", [](const Array& x) { return min(x, -1); }, -3, 3},
      {"prod_axis", [](const Array& x) { return prod(x, 1); }, -2, 2},
      {"mean", [](const Array& x) { return mean(x, {0, 1}); }, -3, 3},
      {"var", [](const Array& x) { return var(x, 1); }, -3, 3},
      {"argmax", [](const Array& x) { return argmax(x, 1); }, -3, 3},
      {"argmin", [](const Array& x) { return argmin(x, 0, true); }, -3, 3},
      {"cumsum", [](const Array& x) { return cumsum(x, 1); }, -3, 3},
      {"cumsum_rev", [](const Array& x) { return cumsum(x, 0, true); }, -3, 3},
      {"cumprod", [](const Array& x) { return cumprod(x, 1); }, -1.5, 1.5},
      {"cumprod_rev", [](const Array& x) { return cumprod(x, 0, true); }, -1.5, 1.5},
      {"cummax", [](const Array& x) { return cummax(x, 1); }, -3, 3},
      {"cummin_rev", [](const Array& x) { return cummin(x, -1, true); }, -3, 3},
      {"logsumexp", [](const Array& x) { return logsumexp(x, 1); }, -3, 3},
      {"softmax", [](const Array& x) { return softmax(x); }, -3, 3},
      {"log_softmax", [](const Array& x) { return log_softmax(x, 0); }, -3, 3},
      {"transpose", [](const Array& x) { return transpose(x); }, -3, 3},
      {"reshape", [](const Array& x) { return reshape(x, {10, -1}); }, -3, 3},
      {"slice", [](const Array& x) { return slice(x, {0, 1}, {4, 5}, {2, 2}); }, -3, 3},
      {"reverse", [](const Array& x) { return reverse(x, 1); }, -3, 3},
      {"pad", [](const Array& x) { return pad(x, {1, 0}, {0, 2}, 9.0); }, -3, 3},
      {"concat", [](const Array& x) { return concatenate({x, x * 2.0}, 1); }, -3, 3},
      {"stack", [](const Array& x) { return stack({x, -x}, 0); }, -3, 3},
      {"broadcast", [](const Array& x) { return broadcast_to(sum(x, 0), {2, 5}); }, -3, 3},
      {"dynamic_slice", [](const Array& x) { return dynamic_slice(x, {Array(1), Array(3)}, {2, 2}); }, -3, 3},
      {"dynamic_update_slice",
       [](const Array& x) { return dynamic_update_slice(x, ones({1, 2}), {Array(2), Array(1)}); }, -3, 3},
      {"take", [](const Array& x) { return take(x, array({3, 0, 1}), 0); }, -3, 3},
      {"scatter_add", [](const Array& x) { return scatter_add(x, array({1, 3, 1}), ones({3, 5}) * 2.0); }, -3, 3},
      {"take_axis1", [](const Array& x) { return take(x, array({4, 4, 0}), 1); }, -3, 3},
      {"matmul", [](const Array& x) { return matmul(x, transpose(x)); }, -3, 3},
      {"astype_i32", [](const Array& x) { return astype(x, DType::kInt32); }, -3, 3},
      {"isfinite", [](const Array& x) { return isfinite(log(x)); }, -1, 3},
      {"compare", [](const Array& x) { return logical_and(x > -1, x <= 1); }, -3, 3},
      {"stop_gradient", [](const Array& x) { return stop_gradient(x) * x; }, -3, 3},
      {"argsort", [](const Array& x) { return argsort(x, 1); }, -3, 3},
      {"argsort_desc_axis0", [](const Array& x) { return argsort(x, 0, true); }, -3, 3},
      {"sort", [](const Array& x) { return sort(x, 0); }, -3, 3},
      {"sort_desc", [](const Array& x) { return sort(x, -1, true); }, -3, 3},
      {"top_k", [](const Array& x) { return top_k(x, 3).first; }, -3, 3},
      {"take_along_axis", [](const Array& x) { return take_along_axis(x, argsort(-x, 0), 0) * 2.0; }, -3, 3},
  };
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(c.name);
    Array x = sample({4, 5}, c.lo, c.hi);
    Array eager = c.f(x);
    Array jitted = jit(c.f)(x);
    EXPECT_FALSE(eager.is_tracer());
    testing_util::expect_same_values(jitted, eager, 1e-5, 1e-6, c.name + " jit vs eager");
    std::vector<Buffer> ref = testing_util::reference(c.f, x);
    ASSERT_EQ(ref.size(), 1u);
    EXPECT_EQ(ref[0].abstract_value(), eager.aval());
    expect_allclose(eager, ref[0].to_doubles(), 1e-5, 1e-5, c.name + " eager vs reference");
  }
}

// Sorting: stability, NaN placement, descending order, top_k's ties and errors, integer keys, gradients (to the
// elements where they were) and a symbolic batch.
// erfc and erf_inv in double precision: against the reference evaluator's bisection on erfl (for erf_inv)
// and libm's erfc, in the tails where 1 - erf loses every digit, and at the special values.
TEST(OpsTest, ErfcAndErfInvAreAccurateInTheTails) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> ys = {0.0, -0.0, 1e-300, 1e-8, 0.3, -0.5, 0.5000001, 0.9, -0.99, 0.999999,
                            1 - 1e-12, -(1 - 1e-15), 1.0, -1.0, 1.5, -2.0};
  Array y = array(ys, {static_cast<int64_t>(ys.size())});
  std::vector<double> got = erf_inv(y).to_vector<double>();
  std::vector<double> ref = testing_util::reference([](const Array& a) { return erf_inv(a); }, y)[0].to_doubles();
  for (size_t i = 0; i < ys.size(); ++i) {
    SCOPED_TRACE(ys[i]);
    if (std::isnan(ref[i]) || std::isinf(ref[i])) {
      EXPECT_TRUE(std::isnan(ref[i]) ? std::isnan(got[i]) : got[i] == ref[i]);
      continue;
    }
    EXPECT_NEAR(got[i], ref[i], 4e-16 * std::fabs(ref[i])) << "erf_inv";
    if (std::fabs(ys[i]) < 1) {
      EXPECT_NEAR(std::erf(got[i]), ys[i], 2.3e-16) << "erf(erf_inv(y))";
    }
  }
  EXPECT_EQ(got[12], inf);
  EXPECT_EQ(got[13], -inf);
  EXPECT_TRUE(std::signbit(got[1]));
  // erfc where erf rounds to 1: 1 - erf(x) is 0, erfc keeps full relative precision.
  Array x = array(std::vector<double>{6.0, 10.0, 26.0, -3.0}, {4});
  std::vector<double> c = erfc(x).to_vector<double>();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c[i], std::erfc(x.to_vector<double>()[i]));
  EXPECT_GT(c[1], 0.0);
  EXPECT_EQ((1.0 - erf(x)).to_vector<double>()[1], 0.0);
  // f32: computed in double and rounded.
  Array yf = array(std::vector<float>{0.25f, -0.999f, 0.9999999f}, {3});
  std::vector<float> gf = erf_inv(yf).to_vector<float>();
  std::vector<double> rf =
      testing_util::reference([](const Array& a) { return erf_inv(astype(a, DType::kFloat64)); }, yf)[0].to_doubles();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(gf[i], rf[i], 6e-8 * std::fabs(rf[i])) << yf.to_vector<float>()[i];
}

// Cumulative ops against a naive loop, over lengths that are and are not powers of two, both axes, both
// directions; NaN propagation; integers; the gradient of cumprod against central differences.
TEST(OpsTest, CumulativeOpsMatchANaiveLoop) {
  for (int64_t len : {1, 2, 5, 8, 9}) {
    for (int axis : {0, 1}) {
      for (bool rev : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "length " << len << " axis " << axis << " reverse " << rev);
        std::vector<int64_t> dims = axis == 0 ? std::vector<int64_t>{len, 3} : std::vector<int64_t>{3, len};
        Array x = sample(dims, -1.7, 1.9);
        std::vector<float> v = x.to_vector<float>();
        auto expected = [&](int which) {
          std::vector<double> out(v.size());
          for (int64_t o = 0; o < 3; ++o) {
            double acc = 0;
            for (int64_t s = 0; s < len; ++s) {
              const int64_t i = rev ? len - 1 - s : s;
              const size_t at = static_cast<size_t>(axis == 0 ? i * 3 + o : o * len + i);
              const double e = v[at];
              acc = s == 0 ? e : (which == 0 ? static_cast<float>(acc) * static_cast<float>(e) : which == 1 ? std::max(acc, e) : std::min(acc, e));
              out[at] = acc;
            }
          }
          return out;
        };
        expect_allclose(cumprod(x, axis, rev), expected(0), 1e-6, 1e-7, "cumprod");
        expect_allclose(cummax(x, axis, rev), expected(1), 0, 0, "cummax");
        expect_allclose(cummin(x, axis, rev), expected(2), 0, 0, "cummin");
      }
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> m = cummax(array(std::vector<float>{1, nan, 3}, {3}), 0).to_vector<float>();
  EXPECT_EQ(m[0], 1.0f);
  EXPECT_TRUE(std::isnan(m[1]) && std::isnan(m[2]));
  EXPECT_EQ(cumprod(array({2, -3, 4}), 0).to_vector<int32_t>(), (std::vector<int32_t>{2, -6, -24}));
  // d/dx_j sum(cumprod(x)) = sum_{i >= j} prod_{k <= i, k != j} x_k
  std::vector<double> xs = {0.9, -1.2, 0.7, 1.3, -0.4};
  Array x = array(xs, {5});
  std::vector<double> g = grad([](const Array& a) { return sum(cumprod(a, 0)); })(x).to_vector<double>();
  for (size_t j = 0; j < 5; ++j) {
    double want = 0;
    for (size_t i = j; i < 5; ++i) {
      double p = 1;
      for (size_t k = 0; k <= i; ++k) p *= k == j ? 1.0 : xs[k];
      want += p;
    }
    EXPECT_NEAR(g[j], want, 1e-14) << j;
  }
  EXPECT_THAT(error_of([] { cummax(array({1.0f}), 1); }), HasSubstr("cummax"));
}

TEST(OpsTest, SortArgsortAndTopK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Array x = array<float>({3, nan, -1, 3, 0, -0.0f, 2}, {7});
  EXPECT_EQ(argsort(x).to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 5, 6, 0, 3, 1}));  // ties keep order
  EXPECT_EQ(argsort(x, 0, true).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 3, 6, 4, 5, 2}));
  std::vector<float> sorted = sort(x).to_vector<float>();
  EXPECT_TRUE(std::isnan(sorted.back()));
  EXPECT_EQ(std::vector<float>(sorted.begin(), sorted.end() - 1), (std::vector<float>{-1, 0, -0.0f, 2, 3, 3}));
  auto [values, positions] = top_k(array<float>({1, 5, 5, 2, 9, 0}, {2, 3}), 2);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{5, 5, 9, 2}));
  EXPECT_EQ(positions.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 1, 0}));
  EXPECT_EQ(sort(array({4, -2, 7, 0}), 0, true).to_vector<int32_t>(), (std::vector<int32_t>{7, 4, 0, -2}));
  EXPECT_THAT(error_of([&] { (void)top_k(x, 8); }), HasSubstr("[top_k] expected 0 <= k <= 7"));
  EXPECT_THAT(error_of([&] { (void)argsort(array<bool>({true, false}, {2})); }),
              HasSubstr("[argsort] expected a numeric array, found bool[2]"));
  EXPECT_THAT(error_of([&] { (void)take_along_axis(ones({2, 3}), array({0, 1}), 1); }),
              HasSubstr("[take_along_axis] expected indices of the array's rank 2"));
  // d/dx sum(sort(x) * w) = w at each element's sorted position.
  Array v = array<float>({0.5f, -2, 1.5f, 0}, {4});
  Array w = array<float>({1, 10, 100, 1000}, {4});
  Array g = grad([&](const Array& a) { return sum(sort(a) * w); })(v);
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{100, 1, 1000, 10}));
  // A symbolic batch: sorting along the static axis traces and runs on two sizes.
  mcx::ir::Program p = trace([](const Array& a) { return top_k(a, 2).second; },
                             AbstractValue{DType::kFloat32, symbolic_shape("b, 5")});
  EXPECT_EQ(p.result_types()[0].to_string(), "i32[b,2]");
  auto f = jit([](const Array& a) { return sort(a, 1, true); });
  EXPECT_EQ(f(sample({3, 5}, -1, 1)).dims(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(f(sample({1, 5}, -1, 1)).dims(), (std::vector<int64_t>{1, 5}));
}

// Multi-operand sort against std::stable_sort of (key0, key1, position) tuples, per row and per column, both
// directions, keys with many ties; the values' gradient lands at their sorted positions.
TEST(OpsTest, MultiOperandSortIsLexicographicAndStable) {
  std::mt19937 gen(17);
  std::uniform_int_distribution<int> small(0, 2);
  const int64_t rows = 3, cols = 9;
  std::vector<int32_t> k0(rows * cols), k1(rows * cols);
  std::vector<float> vals(rows * cols);
  for (size_t i = 0; i < k0.size(); ++i) {
    k0[i] = small(gen);
    k1[i] = small(gen);
    vals[i] = static_cast<float>(i);
  }
  const Array a0 = array<int32_t>(k0, {rows, cols}), a1 = array<int32_t>(k1, {rows, cols});
  const Array v = array<float>(vals, {rows, cols});
  for (int axis : {0, 1}) {
    for (bool descending : {false, true}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + (descending ? " descending" : " ascending"));
      std::vector<Array> out = sort({a0, a1, v}, axis, /*num_keys=*/2, descending);
      ASSERT_EQ(out.size(), 3u);
      const std::vector<float> got = out[2].to_vector<float>();
      const int64_t lines = axis == 1 ? rows : cols, n = axis == 1 ? cols : rows;
      for (int64_t line = 0; line < lines; ++line) {
        auto at = [&](int64_t j) { return axis == 1 ? line * cols + j : j * cols + line; };
        std::vector<int64_t> order(n);
        for (int64_t j = 0; j < n; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
          auto kp = std::make_pair(k0[at(p)], k1[at(p)]), kq = std::make_pair(k0[at(q)], k1[at(q)]);
          return descending ? kq < kp : kp < kq;
        });
        for (int64_t j = 0; j < n; ++j) EXPECT_EQ(got[at(j)], vals[at(order[j])]) << "line " << line << " slot " << j;
      }
    }
  }
  // One key: the values follow the key's stable order; the keys come back sorted.
  std::vector<Array> by_key = sort({array({2, 1, 2, 0}), array<float>({10, 20, 30, 40}, {4})}, 0);
  EXPECT_EQ(by_key[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 2}));
  EXPECT_EQ(by_key[1].to_vector<float>(), (std::vector<float>{40, 20, 10, 30}));
  // d/dv sum(sorted_v * w) puts w's entries at the values' original positions.
  const Array w = array<float>({1, 10, 100, 1000}, {4});
  Array g = grad([&](const Array& x) { return sum(sort({array({2, 1, 2, 0}), x}, 0)[1] * w); })(
      array<float>({10, 20, 30, 40}, {4}));
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{100, 10, 1000, 1}));
  EXPECT_THAT(error_of([&] { (void)sort({a0, array({1, 2})}, 1); }),
              HasSubstr("[sort] every operand must have operand 0's shape i32[3,9]; operand 1 is i32[2]"));
  EXPECT_THAT(error_of([&] { (void)sort({a0, v}, 1, 3); }), HasSubstr("[sort] expected num_keys in [1, 2]"));
}

TEST(OpsTest, BroadcastingAndPromotionTable) {
  Array f32 = array<float>({1, 2, 3}, {3});
  Array f64 = array<double>({1, 2, 3}, {3});
  Array i32 = array({1, 2, 3});
  Array u8 = array<uint8_t>({1, 2, 3}, {3});
  Array b = array<bool>({true, false, true}, {3});
  Array bf = astype(f32, DType::kBFloat16);
  struct Row {
    Array x, y;
    DType expected;
  };
  std::vector<Row> rows = {
      {f32, f64, DType::kFloat64},   {f32, i32, DType::kFloat32},  {i32, u8, DType::kInt32},
      {u8, b, DType::kUInt8},        {f32, Array(2.0), DType::kFloat32}, {i32, Array(2), DType::kInt32},
      {u8, Array(2), DType::kUInt8}, {i32, Array(2.5), DType::kFloat32}, {bf, Array(2.0), DType::kBFloat16},
      {b, Array(1), DType::kInt32},  {Array(1), Array(2.0), DType::kFloat32}, {f64, Array(0.5f), DType::kFloat64},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.x.aval().to_string() + " + " + r.y.aval().to_string());
    EXPECT_EQ((r.x + r.y).dtype(), r.expected);
    EXPECT_EQ((r.y * r.x).dtype(), r.expected);
    EXPECT_EQ(result_type(r.x, r.y), r.expected);
  }
  // Weak scalar arithmetic alone stays weak; meeting a strong array it adopts that dtype.
  EXPECT_TRUE((Array(1.0) + Array(2.0)).weak_type());
  EXPECT_FALSE((f32 + 1.0).weak_type());
  // f64 + 0.1 keeps the exact double literal (no rounding through f32).
  EXPECT_EQ((f64 * 0.1).to_vector<double>()[0], 0.1);
  // Broadcasting: [2,1,3] with [4,1] -> [2,4,3].
  Array a = ones({2, 1, 3});
  Array c = ones({4, 1}) * 2.0;
  Array s = a + c;
  EXPECT_EQ(s.dims(), (std::vector<int64_t>{2, 4, 3}));
  expect_allclose(sum(s), {3.0 * 24});
  // Comparisons return bool; integer division is true division.
  EXPECT_EQ((i32 > 1).dtype(), DType::kBool);
  expect_allclose(i32 / 2, {0.5, 1.0, 1.5});
  EXPECT_EQ((i32 / 2).dtype(), DType::kFloat32);
}

TEST(OpsTest, ShapeErrorsNameOpAndShapes) {
  Array x = ones({3, 4}), y = ones({5});
  EXPECT_EQ(error_of([&] { (void)add(x, y); }),
            "[add] shapes [3,4] and [5] cannot be broadcast: dimension 1 is 4 vs 5");
  EXPECT_THAT(error_of([&] { (void)(x * y); }), HasSubstr("[multiply] shapes [3,4] and [5]"));
  EXPECT_THAT(error_of([&] { (void)matmul(ones({4, 3}), ones({5, 2})); }),
              HasSubstr("[matmul] contracting dimensions differ: lhs f32[4,3] dim 1 is 3, rhs f32[5,2] dim 0 is 5"));
  EXPECT_THAT(error_of([&] { (void)sum(x, 2); }), HasSubstr("[sum] axis 2 is out of range for rank 2"));
  EXPECT_THAT(error_of([&] { (void)reshape(x, {5, 2}); }), HasSubstr("[reshape] cannot reshape f32[3,4]"));
  EXPECT_THAT(error_of([&] { (void)jit([](const Array& a) { return a + ones({2}); })(x); }),
              HasSubstr("[add] shapes [3,4] and [2]"));
  EXPECT_THAT(error_of([&] { (void)Array().shape(); }), HasSubstr("empty"));
}

TEST(OpsTest, MatmulFollowsNumpyRules) {
  Array a = sample({2, 3, 4}, -1, 1);
  Array b = sample({4, 5}, -1, 1);
  Array v = sample({4}, -1, 1);
  Array bb = sample({2, 4, 5}, -1, 1);
  std::vector<double> ad = a.to_host().to_doubles(), bd = b.to_host().to_doubles(), vd = v.to_host().to_doubles(),
                      bbd = bb.to_host().to_doubles();
  // Batched x matrix and batched x batched against a naive double loop.
  std::vector<double> ref(2 * 3 * 5, 0.0), refb(2 * 3 * 5, 0.0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 4; ++k) {
          ref[(n * 3 + i) * 5 + j] += ad[(n * 3 + i) * 4 + k] * bd[k * 5 + j];
          refb[(n * 3 + i) * 5 + j] += ad[(n * 3 + i) * 4 + k] * bbd[(n * 4 + k) * 5 + j];
        }
  expect_allclose(matmul(a, b), ref);
  expect_allclose(matmul(a, bb), refb);
  Array mv = matmul(a, v);
  EXPECT_EQ(mv.dims(), (std::vector<int64_t>{2, 3}));
  std::vector<double> refv(6, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int k = 0; k < 4; ++k) refv[r] += ad[r * 4 + k] * vd[k];
  expect_allclose(mv, refv);
  Array vv = matmul(v, v);
  EXPECT_EQ(vv.ndim(), 0);
  expect_allclose(vv, {std::inner_product(vd.begin(), vd.end(), vd.begin(), 0.0)});
  EXPECT_EQ(matmul(v, b).dims(), (std::vector<int64_t>{5}));
}

TEST(OpsTest, NumericallyStableReductions) {
  Array x = array<float>({1000, 1001, 1002, -1000, 0, 1000}, {2, 3});
  double l0 = 1002 + std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  double l1 = 1000 + std::log(std::exp(-2000.0) + std::exp(-1000.0) + 1.0);
  expect_allclose(logsumexp(x, 1), {l0, l1});
  Array sm = softmax(x);
  expect_allclose(sum(sm, 1), {1.0, 1.0});
  expect_allclose(log_softmax(x), {1000 - l0, 1001 - l0, 1002 - l0, -1000 - l1, 0 - l1, 1000 - l1}, 1e-5, 1e-3);
  // Infinite rows do not produce NaN shifts.
  Array inf = array<float>({-INFINITY, 0}, {2});
  expect_allclose(softmax(inf), {0.0, 1.0});
}

TEST(OpsTest, CreationAndIndexing) {
  expect_allclose(arange(5), {0, 1, 2, 3, 4});
  expect_allclose(arange(1.0, 2.0, 0.25, DType::kFloat32), {1.0, 1.25, 1.5, 1.75});
  expect_allclose(eye(2), {1, 0, 0, 1});
  expect_allclose(one_hot(array({2, 0}), 3), {0, 0, 1, 1, 0, 0});
  expect_allclose(full({2}, 7), {7, 7});
  EXPECT_EQ(full({2}, 7).dtype(), DType::kInt32);
  expect_allclose(take_along_last(array<float>({1, 2, 3, 4, 5, 6}, {2, 3}), array({2, 0})), {3, 4});
  expect_allclose(squeeze(ones({1, 3, 1})), {1, 1, 1});
  EXPECT_EQ(squeeze(ones({1, 3, 1})).dims(), (std::vector<int64_t>{3}));
  EXPECT_EQ(expand_dims(ones({3}), -1).dims(), (std::vector<int64_t>{3, 1}));
}

TEST(OpsTest, ItemAndBool) {
  Array m = array<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_THAT(error_of([&] { (void)m.item<float>(); }), HasSubstr("[item] expected an array with exactly one"));
  EXPECT_THAT(error_of([&] { (void)static_cast<bool>(m > 0); }), HasSubstr("[bool] the truth value"));
  EXPECT_TRUE(static_cast<bool>(sum(m) > 9));
  EXPECT_EQ(sum(m).item<float>(), 10.0f);
  EXPECT_EQ(m.to_vector<int>(), (std::vector<int>{1, 2, 3, 4}));
  Array c = m;
  c += 1;
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(m.to_vector<float>()[0], 1.0f) << "compound assignment must not mutate other handles";
  EXPECT_THAT(m.to_string(), HasSubstr("f32[2,2]"));
  EXPECT_GT(eager_cache_stats().hits, 0);
}

}  // namespace
}  // namespace mcx
