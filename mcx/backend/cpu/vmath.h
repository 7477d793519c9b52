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

// exp(x) is exactly +0 below these: the largest x with a non-zero result is -103.972076f for float and
// -745.133 for double, in glibc's scalar exp and in libmvec's at every vector width. exp (and logistic's
// exp(-x)) of such an input is computed as exp(0) * 0 = +0, so that no lane of the vector function is out of
// its range: libmvec sends a vector with any out-of-range lane through glibc's scalar code, which made a
// softmax under a -1e9 attention mask 4x slower.
// The generated kernels (codegen/element_emitter.cc) apply the same rule, so both stay bit for bit equal.
inline constexpr float kExpZeroBelowF = -104.0f;
inline constexpr double kExpZeroBelowD = -746.0;

void vmath(VFn fn, const float* x, float* y, int64_t n);
void vmath(VFn fn, const double* x, double* y, int64_t n);
void vpow(const float* x, const float* y, float* out, int64_t n);
void vpow(const double* x, const double* y, double* out, int64_t n);

}  // namespace mcx::cpu
