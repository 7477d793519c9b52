// Vectorised transcendental functions over arrays (glibc libmvec under -ffast-math, with AVX-512 / AVX2 /
// SSE2 clones chosen at load time). Accuracy: within a few ulp of the correctly rounded result on normal
// ranges (tests/backend/vmath_test.cc measures it); inf, NaN, zero, denormals and overflow follow IEEE
// (exp(-inf) = 0, log(0) = -inf, log(-1) = NaN, exp(1000) = inf, ...). x and y may alias exactly.
// An element's result depends only on its input, never on its position in the array or on n (so tiling and
// row blocking cannot change results).
#pragma once

#include <cstdint>

namespace mcx::cpu {

enum class VFn { kExp, kLog, kLog1p, kExpm1, kTanh, kLogistic, kSin, kCos, kSqrt, kRsqrt };

void vmath(VFn fn, const float* x, float* y, int64_t n);
void vmath(VFn fn, const double* x, double* y, int64_t n);
void vpow(const float* x, const float* y, float* out, int64_t n);
void vpow(const double* x, const double* y, double* out, int64_t n);

}  // namespace mcx::cpu
