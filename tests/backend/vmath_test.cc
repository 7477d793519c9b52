// Accuracy of the vectorised transcendentals against higher precision (double for f32, long double for
// f64), measured in ulps of the result type and printed; and IEEE special values.
#include "mcx/backend/cpu/vmath.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mcx::cpu {
namespace {

template <typename T>
double ulp_error(T got, long double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : 1e9;
  if (std::isinf(ref)) return (got == static_cast<T>(ref)) ? 0 : 1e9;
  const T r = static_cast<T>(ref);
  T ulp = std::nextafter(std::fabs(r), std::numeric_limits<T>::infinity()) - std::fabs(r);
  if (!(ulp > 0)) ulp = std::numeric_limits<T>::denorm_min();
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp);
}

long double reference(VFn fn, long double x) {
  switch (fn) {
    case VFn::kExp: return std::exp(x);
    case VFn::kLog: return std::log(x);
    case VFn::kLog1p: return std::log1p(x);
    case VFn::kExpm1: return std::expm1(x);
    case VFn::kTanh: return std::tanh(x);
    case VFn::kLogistic: return 1.0L / (1.0L + std::exp(-x));
    case VFn::kSin: return std::sin(x);
    case VFn::kCos: return std::cos(x);
    case VFn::kSqrt: return std::sqrt(x);
    case VFn::kRsqrt: return 1.0L / std::sqrt(x);
  }
  return 0;
}

struct Case {
  VFn fn;
  const char* name;
  double lo, hi;
  bool log_uniform;
  double max_ulp_f32, max_ulp_f64;
};

const Case kCases[] = {
    {VFn::kExp, "exp", -87, 88, false, 4, 4},
    {VFn::kExp, "exp(denormal results)", -103, -88, false, 4, 4},
    {VFn::kLog, "log", 1e-30, 1e30, true, 4, 4},
    {VFn::kLog, "log(near 1)", 0.5, 2, false, 4, 4},
    {VFn::kLog1p, "log1p", -0.99, 100, false, 4, 4},
    {VFn::kExpm1, "expm1", -20, 20, false, 4, 4},
    {VFn::kExpm1, "expm1(small)", -1e-3, 1e-3, false, 4, 4},
    {VFn::kTanh, "tanh", -10, 10, false, 4, 4},
    {VFn::kLogistic, "logistic", -20, 20, false, 4, 4},
    {VFn::kSin, "sin", -100, 100, false, 4, 4},
    {VFn::kCos, "cos", -100, 100, false, 4, 4},
    {VFn::kSqrt, "sqrt", 1e-20, 1e20, true, 1, 1},
    {VFn::kRsqrt, "rsqrt", 1e-20, 1e20, true, 2, 2},
};

template <typename T>
double max_ulp(const Case& c) {
  const int n = 200003;  // odd: exercises the scalar tail too
  std::mt19937_64 rng(1234);
  std::vector<T> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    double v = c.log_uniform ? std::exp(std::log(c.lo) + u * (std::log(c.hi) - std::log(c.lo))) : c.lo + u * (c.hi - c.lo);
    x[i] = static_cast<T>(v);
  }
  vmath(c.fn, x.data(), y.data(), n);
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    // Denormal results of f32 exp: absolute error in units of the smallest denormal.
    worst = std::max(worst, ulp_error<T>(y[i], reference(c.fn, static_cast<long double>(x[i]))));
  }
  return worst;
}

TEST(Vmath, AccuracyInUlps) {
  for (const Case& c : kCases) {
    const double uf = max_ulp<float>(c), ud = max_ulp<double>(c);
    std::printf("[vmath] %-24s max ulp error: f32 %.2f, f64 %.2f\n", c.name, uf, ud);
    EXPECT_LE(uf, c.max_ulp_f32) << c.name << " f32";
    EXPECT_LE(ud, c.max_ulp_f64) << c.name << " f64";
  }
}

template <typename T>
void check_specials() {
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T dmin = std::numeric_limits<T>::denorm_min();
  struct S { VFn fn; T x; T expected; };
  const std::vector<S> specials = {
      {VFn::kExp, inf, inf},        {VFn::kExp, -inf, 0},          {VFn::kExp, 0, 1},
      {VFn::kExp, T(1000), inf},    {VFn::kExp, T(-1000), 0},      {VFn::kExp, dmin, 1},
      {VFn::kLog, 0, -inf},         {VFn::kLog, inf, inf},         {VFn::kLog, 1, 0},
      {VFn::kLog, T(-1), nan},      {VFn::kLog, dmin, static_cast<T>(std::log(static_cast<long double>(dmin)))},
      {VFn::kLog1p, T(-1), -inf},   {VFn::kLog1p, T(-2), nan},     {VFn::kLog1p, inf, inf},   {VFn::kLog1p, 0, 0},
      {VFn::kExpm1, -inf, T(-1)},   {VFn::kExpm1, inf, inf},       {VFn::kExpm1, 0, 0},
      {VFn::kTanh, inf, 1},         {VFn::kTanh, -inf, T(-1)},     {VFn::kTanh, T(50), 1},    {VFn::kTanh, 0, 0},
      {VFn::kLogistic, inf, 1},     {VFn::kLogistic, -inf, 0},     {VFn::kLogistic, 0, T(0.5)},
      {VFn::kSqrt, inf, inf},       {VFn::kSqrt, T(-1), nan},      {VFn::kSqrt, 0, 0},
      {VFn::kRsqrt, 0, inf},        {VFn::kRsqrt, inf, 0},
      {VFn::kSin, inf, nan},        {VFn::kCos, -inf, nan},
  };
  for (VFn fn : {VFn::kExp, VFn::kLog, VFn::kLog1p, VFn::kExpm1, VFn::kTanh, VFn::kLogistic, VFn::kSin, VFn::kCos,
                 VFn::kSqrt, VFn::kRsqrt}) {
    T x[17], y[17];
    for (T& v : x) v = nan;
    vmath(fn, x, y, 17);
    for (int i = 0; i < 17; ++i) EXPECT_TRUE(std::isnan(y[i])) << "NaN in, lane " << i << ", fn " << static_cast<int>(fn);
  }
  for (const S& s : specials) {
    // Put the special in every lane position of a vector-sized block, surrounded by ordinary values.
    for (int pos = 0; pos < 17; ++pos) {
      T x[17], y[17];
      for (T& v : x) v = T(0.5);
      x[pos] = s.x;
      vmath(s.fn, x, y, 17);
      if (std::isnan(s.expected)) {
        EXPECT_TRUE(std::isnan(y[pos])) << "fn " << static_cast<int>(s.fn) << " x=" << s.x;
      } else {
        EXPECT_EQ(y[pos], s.expected) << "fn " << static_cast<int>(s.fn) << " x=" << s.x << " pos " << pos;
      }
    }
  }
}

TEST(Vmath, SpecialValuesF32) { check_specials<float>(); }
TEST(Vmath, SpecialValuesF64) { check_specials<double>(); }

TEST(Vmath, Pow) {
  std::vector<float> x = {2, 0.5f, 0, 0, -2, -2, 1, std::numeric_limits<float>::infinity(), 3};
  std::vector<float> p = {10, -1, 0, -1, 3, 0.5f, std::numeric_limits<float>::quiet_NaN(), -1, 2.5f};
  std::vector<float> y(x.size());
  vpow(x.data(), p.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float e = std::pow(x[i], p[i]);
    if (std::isnan(e)) EXPECT_TRUE(std::isnan(y[i])) << i;
    else EXPECT_LE(ulp_error<float>(y[i], std::pow(static_cast<long double>(x[i]), static_cast<long double>(p[i]))), 4) << i;
  }
}

// The point of vmath is that the loops really call libmvec's vector variants (see docs/performance.md for
// the objdump check): a vectorised exp is several times faster than scalar std::exp. Minimum of several
// runs, and a lenient factor, so that a loaded machine does not make this flaky.
// An element's result must not depend on where the array starts, on n, or on in-place use: fused tiles
// and row blocks (executable.cc) call vmath on different sub-ranges of the same values.
template <typename T>
void check_position_independent() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<T> u(T(0.01), T(20));
  std::vector<T> x(1000), full(1000), part(1000), y(1000);
  for (T& v : x) v = u(rng);
  const VFn fns[] = {VFn::kExp, VFn::kLog, VFn::kLog1p, VFn::kExpm1, VFn::kTanh, VFn::kLogistic,
                     VFn::kSin, VFn::kCos, VFn::kSqrt, VFn::kRsqrt};
  for (VFn fn : fns) {
    vmath(fn, x.data(), full.data(), 1000);
    vpow(x.data(), x.data(), y.data(), 1000);
    for (int64_t start : {1, 3, 7, 17, 63, 100}) {
      for (int64_t n : {1, 5, 31, 64, 65, 200, 899}) {
        vmath(fn, x.data() + start, part.data(), n);
        std::vector<T> inplace(x.begin() + start, x.begin() + start + n);
        vmath(fn, inplace.data(), inplace.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::memcmp(&part[i], &full[start + i], sizeof(T)), 0)
              << "fn " << static_cast<int>(fn) << " start " << start << " n " << n << " i " << i;
          ASSERT_EQ(std::memcmp(&inplace[i], &full[start + i], sizeof(T)), 0) << "in place, fn " << static_cast<int>(fn);
        }
        vpow(x.data() + start, x.data() + start, part.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::memcmp(&part[i], &y[start + i], sizeof(T)), 0) << "pow";
      }
    }
  }
}

TEST(Vmath, ResultsIndependentOfPositionAndLength) {
  check_position_independent<float>();
  check_position_independent<double>();
}

TEST(Vmath, ExpIsVectorised) {
#if defined(MCX_SANITIZER_BUILD)
  GTEST_SKIP() << "timing comparison: meaningless under a sanitizer (instrumented loads and stores dominate)";
#endif
  const int n = 1 << 18;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) / 100.0f - 5.0f;
  auto min_time = [&](auto&& fn) {
    double best = 1e30;
    for (int rep = 0; rep < 9; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  volatile float sink = 0;
  const double vec = min_time([&] { vmath(VFn::kExp, x.data(), y.data(), n); sink = sink + y[n / 2]; });
  const double scalar = min_time([&] {
    for (int i = 0; i < n; ++i) y[i] = std::exp(x[i]);
    sink = sink + y[n / 2];
  });
  std::printf("[vmath] exp over %d f32: vectorised %.3f ms, scalar std::exp %.3f ms\n", n, vec * 1e3, scalar * 1e3);
  EXPECT_LT(vec * 1.5, scalar) << "vmath exp is not faster than scalar exp: is libmvec used?";
}

TEST(Vmath, ExpUnderflowsToExactZeroAndKeepsItsSubnormalResults) {
  // Below the threshold exp is +0 (computed without handing libmvec an out-of-range lane); from there to the
  // normal range its subnormal results stay exp's (within vmath's few ulps, AccuracyInUlps); logistic of large x is 1.
  std::vector<float> x;
  for (float v = -130.0f; v < -80.0f; v += 0.0371f) x.push_back(v);
  x.push_back(-1e9f);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(kExpZeroBelowF);
  x.push_back(std::nextafter(kExpZeroBelowF, 0.0f));
  std::vector<float> y(x.size()), lg(x.size());
  vmath(VFn::kExp, x.data(), y.data(), static_cast<int64_t>(x.size()));
  std::vector<float> neg(x.size());
  for (size_t i = 0; i < x.size(); ++i) neg[i] = -x[i];
  vmath(VFn::kLogistic, neg.data(), lg.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < kExpZeroBelowF) {
      uint32_t bits;
      std::memcpy(&bits, &y[i], 4);
      EXPECT_EQ(bits, 0u) << "exp(" << x[i] << ") = " << y[i] << ", expected +0";
    } else {
      EXPECT_LE(ulp_error<float>(y[i], std::exp(static_cast<long double>(x[i]))), 4.0) << "exp(" << x[i] << ")";
    }
    EXPECT_EQ(lg[i], 1.0f / (1.0f + y[i])) << "logistic(" << neg[i] << ")";
  }
  double d[] = {-1e300, -746.5, -745.5, -745.0, -700.0};
  double dy[5];
  vmath(VFn::kExp, d, dy, 5);
  EXPECT_EQ(dy[0], 0.0);
  EXPECT_FALSE(std::signbit(dy[0]));
  EXPECT_EQ(dy[1], 0.0);
  EXPECT_EQ(dy[2], std::exp(-745.5));
  EXPECT_GT(dy[3], 0.0);
  EXPECT_EQ(dy[4], std::exp(-700.0));
}

TEST(Vmath, ExpOfMaskedValuesIsNotSlowerThanOfOrdinaryOnes) {
#if defined(MCX_SANITIZER_BUILD)
  GTEST_SKIP() << "timing comparison: meaningless under a sanitizer";
#endif
  // Half the inputs at -1e9 (an attention mask): libmvec would send every vector holding one through glibc's
  // scalar code (~4x slower); vmath keeps them off it.
  const int n = 1 << 18;
  std::vector<float> plain(n), masked(n), y(n);
  for (int i = 0; i < n; ++i) {
    plain[i] = static_cast<float>(i % 1000) / 100.0f - 5.0f;
    masked[i] = (i % 2) ? -1e9f : plain[i];
  }
  auto min_time = [&](const std::vector<float>& in) {
    double best = 1e30;
    for (int rep = 0; rep < 9; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      vmath(VFn::kExp, in.data(), y.data(), n);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double t_plain = min_time(plain), t_masked = min_time(masked);
  std::printf("[vmath] exp over %d f32: %.3f ms, half of them -1e9: %.3f ms\n", n, t_plain * 1e3, t_masked * 1e3);
  EXPECT_LT(t_masked, 2.0 * t_plain);
}

}  // namespace
}  // namespace mcx::cpu
