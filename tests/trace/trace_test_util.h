// Helpers shared by the trace-layer tests.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "tests/support/reference_eval.h"

namespace mcx::testing_util {

// f32 values uniform in [-1, 1) from a seeded std::mt19937_64 (independent of mcx's PRNG).
inline Array random_array(std::vector<int64_t> dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return array(v, dims);
}

inline void expect_allclose(const Array& a, const std::vector<double>& expected, double rtol = 1e-5,
                            double atol = 1e-6, const std::string& what = "") {
  std::vector<double> got = a.to_host().to_doubles();
  ASSERT_EQ(got.size(), expected.size()) << what << " " << a.to_string();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i;
      continue;
    }
    EXPECT_NEAR(got[i], expected[i], atol + rtol * std::fabs(expected[i]))
        << what << " element " << i << " of " << a.to_string();
  }
}

inline void expect_same_values(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-6,
                               const std::string& what = "") {
  EXPECT_EQ(a.aval(), b.aval()) << what;
  expect_allclose(a, b.to_host().to_doubles(), rtol, atol, what);
}

// Evaluates the traced program of f on the concrete args with the independent reference evaluator.
template <typename F, typename... Args>
std::vector<Buffer> reference(const F& f, const Args&... args) {
  ir::Program p = mcx::trace(f, args...);
  std::vector<Buffer> bufs{args.to_host()...};
  auto r = mcx::test::reference_evaluate(p, bufs);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Buffer>{};
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace mcx::testing_util
