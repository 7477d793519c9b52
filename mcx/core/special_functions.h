// Special functions shared by the CPU interpreter and the generated kernels, so both compute the same
// values bit for bit. Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <limits>
#include <numbers>

namespace mcx {

// The inverse error function: erf(erf_inv(y)) = y for y in (-1, 1); +-inf at +-1; NaN outside [-1, 1] and
// for NaN; -0 for -0. Starts from Winitzki's closed-form approximation (relative error < 2e-3) and refines
// it with three Halley steps on erf(x) - |y| (written through erfc above |y| = 0.5, where 1 - |y| is exact
// and erfc keeps the relative accuracy that erf loses near 1), so the result is within a few ulp of the
// true value in double precision. Float callers compute in double and round.
inline double erf_inv(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 0.0) return y;
  if (y == 1.0) return std::numeric_limits<double>::infinity();
  if (y == -1.0) return -std::numeric_limits<double>::infinity();
  const double a = std::fabs(y);
  constexpr double k = 0.147;
  const double ln = std::log((1.0 - a) * (1.0 + a));
  const double t = 2.0 / (std::numbers::pi * k) + ln / 2.0;
  double x = std::sqrt(std::sqrt(t * t - ln / k) - t);
  const double two_over_sqrt_pi = 2.0 / std::sqrt(std::numbers::pi);
  for (int step = 0; step < 3; ++step) {
    const double f = a <= 0.5 ? std::erf(x) - a : (1.0 - a) - std::erfc(x);
    const double slope = two_over_sqrt_pi * std::exp(-x * x);
    if (f == 0.0 || slope == 0.0) break;
    const double r = f / slope;
    x -= r / (1.0 + x * r);
  }
  return y < 0 ? -x : x;
}

}  // namespace mcx
