// Compiled with -O3 -ffast-math -fno-finite-math-only (see mcx/CMakeLists.txt): under __FAST_MATH__
// glibc declares its math functions as SIMD-callable and GCC turns these loops into calls of libmvec's
// _ZGV* variants. target_clones gives AVX-512, AVX2 and baseline versions of each loop.
//
// GCC defines __FAST_MATH__ only when every fast-math flag is on; -fno-finite-math-only (which we keep so
// that inf/NaN stay meaningful) turns it off, and with it glibc's SIMD declarations. libmvec's functions
// handle inf/NaN themselves, so we ask for the declarations explicitly. This must precede every include.
#ifndef __FAST_MATH__
#define __FAST_MATH__ 1
#endif
#include <cmath>
#include <type_traits>

#include "mcx/backend/cpu/vmath.h"
#include "mcx/backend/cpu/multiversion.h"

namespace mcx::cpu {
namespace {

#define MCX_VCLONES MCX_TARGET_CLONES

// Every element goes through the same vector code, whatever its position: the loops run on whole blocks
// of kBlock elements (a multiple of every vector width, fixed trip count, no scalar epilogue), and a
// partial last block (or an in-place call) goes through an aligned local block. Otherwise an element's
// result would depend on where the array starts (libmvec's vector and glibc's scalar functions differ
// in the last bits), and row-block execution (executable.cc) or a different tiling would change results.
template <typename T>
constexpr int kBlock = 256 / static_cast<int>(sizeof(T));  // 64 floats, 32 doubles

#define MCX_VLOOP(NAME, T, EXPR)                                                        \
  [[gnu::always_inline]] inline void NAME##_block(const T* __restrict x, T* __restrict y) { \
    for (int i = 0; i < kBlock<T>; ++i) {                                               \
      const T v = x[i];                                                                 \
      y[i] = (EXPR);                                                                    \
    }                                                                                   \
  }                                                                                     \
  MCX_VCLONES void NAME(const T* x, T* y, int64_t n) {                                  \
    constexpr int64_t B = kBlock<T>;                                                    \
    int64_t i = 0;                                                                      \
    if (x != y) {                                                                       \
      for (; i + B <= n; i += B) NAME##_block(x + i, y + i);                            \
    }                                                                                   \
    alignas(64) T in[B], out[B];                                                        \
    for (; i < n; i += B) {                                                             \
      const int64_t m = n - i < B ? n - i : B;                                          \
      for (int64_t j = 0; j < B; ++j) in[j] = j < m ? x[i + j] : T(1);                  \
      NAME##_block(in, out);                                                            \
      for (int64_t j = 0; j < m; ++j) y[i + j] = out[j];                                \
    }                                                                                   \
  }

MCX_VLOOP(exp_f, float, std::exp(v))
MCX_VLOOP(log_f, float, std::log(v))
MCX_VLOOP(log1p_f, float, std::log1p(v))
MCX_VLOOP(expm1_f, float, std::expm1(v))
MCX_VLOOP(tanh_f, float, std::tanh(v))
MCX_VLOOP(recip_one_plus_f, float, 1.0f / (1.0f + v))
MCX_VLOOP(sin_f, float, std::sin(v))
MCX_VLOOP(cos_f, float, std::cos(v))
MCX_VLOOP(sqrt_f, float, std::sqrt(v))
MCX_VLOOP(rsqrt_f, float, 1.0f / std::sqrt(v))
MCX_VLOOP(exp_d, double, std::exp(v))
MCX_VLOOP(log_d, double, std::log(v))
MCX_VLOOP(log1p_d, double, std::log1p(v))
MCX_VLOOP(expm1_d, double, std::expm1(v))
MCX_VLOOP(tanh_d, double, std::tanh(v))
MCX_VLOOP(recip_one_plus_d, double, 1.0 / (1.0 + v))
MCX_VLOOP(sin_d, double, std::sin(v))
MCX_VLOOP(cos_d, double, std::cos(v))
MCX_VLOOP(sqrt_d, double, std::sqrt(v))
MCX_VLOOP(rsqrt_d, double, 1.0 / std::sqrt(v))
#undef MCX_VLOOP

#define MCX_VPOW(NAME, T)                                                                            \
  [[gnu::always_inline]] inline void NAME##_block(const T* __restrict x, const T* __restrict y,      \
                                                  T* __restrict out) {                               \
    for (int i = 0; i < kBlock<T>; ++i) out[i] = std::pow(x[i], y[i]);                               \
  }                                                                                                  \
  MCX_VCLONES void NAME(const T* x, const T* y, T* out, int64_t n) {                                 \
    constexpr int64_t B = kBlock<T>;                                                                 \
    int64_t i = 0;                                                                                   \
    if (out != x && out != y) {                                                                      \
      for (; i + B <= n; i += B) NAME##_block(x + i, y + i, out + i);                                \
    }                                                                                                \
    alignas(64) T a[B], b[B], r[B];                                                                  \
    for (; i < n; i += B) {                                                                          \
      const int64_t m = n - i < B ? n - i : B;                                                       \
      for (int64_t j = 0; j < B; ++j) a[j] = j < m ? x[i + j] : T(1), b[j] = j < m ? y[i + j] : T(1); \
      NAME##_block(a, b, r);                                                                         \
      for (int64_t j = 0; j < m; ++j) out[i + j] = r[j];                                             \
    }                                                                                                \
  }
MCX_VPOW(pow_f, float)
MCX_VPOW(pow_d, double)
#undef MCX_VPOW

// exp(sign * x) into y, +0 where sign * x is below vmath.h's threshold (kExpZeroBelow*), without handing
// libmvec a lane out of its fast range (which sends the whole vector through glibc's scalar code): the
// arguments are guarded in one pass (0 for those lanes), exp runs on them in another (exp_f / exp_d, called
// through their clones' resolver, so the compiler cannot fold the guard back into exp's argument, as it does
// when both are in one expression under -ffast-math), and a third pass writes the zeros.
template <typename T>
void guarded_exp(const T* x, T* y, int64_t n, T sign, void (*exp_fn)(const T*, T*, int64_t)) {
  constexpr T kBelow = std::is_same_v<T, float> ? kExpZeroBelowF : kExpZeroBelowD;
  constexpr int64_t kChunk = 1024;
  alignas(64) T arg[kChunk], val[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = n - i < kChunk ? n - i : kChunk;
    int any_below = 0;  // an int, not a bool: GCC vectorises this OR-reduction
    for (int64_t j = 0; j < m; ++j) {
      const T a = sign * x[i + j];
      any_below |= a < kBelow ? 1 : 0;
      arg[j] = a < kBelow ? T(0) : a;
    }
    if (!any_below) {  // the common case: exp of the arguments as they are
      exp_fn(arg, y + i, m);
      continue;
    }
    exp_fn(arg, val, m);
    for (int64_t j = 0; j < m; ++j) y[i + j] = sign * x[i + j] < kBelow ? T(0) : val[j];
  }
}

}  // namespace

void vmath(VFn fn, const float* x, float* y, int64_t n) {
  switch (fn) {
    case VFn::kExp: return guarded_exp<float>(x, y, n, 1.0f, exp_f);
    case VFn::kLog: return log_f(x, y, n);
    case VFn::kLog1p: return log1p_f(x, y, n);
    case VFn::kExpm1: return expm1_f(x, y, n);
    case VFn::kTanh: return tanh_f(x, y, n);
    case VFn::kLogistic:  // 1 / (1 + exp(-x))
      guarded_exp<float>(x, y, n, -1.0f, exp_f);
      return recip_one_plus_f(y, y, n);
    case VFn::kSin: return sin_f(x, y, n);
    case VFn::kCos: return cos_f(x, y, n);
    case VFn::kSqrt: return sqrt_f(x, y, n);
    case VFn::kRsqrt: return rsqrt_f(x, y, n);
  }
}

void vmath(VFn fn, const double* x, double* y, int64_t n) {
  switch (fn) {
    case VFn::kExp: return guarded_exp<double>(x, y, n, 1.0, exp_d);
    case VFn::kLog: return log_d(x, y, n);
    case VFn::kLog1p: return log1p_d(x, y, n);
    case VFn::kExpm1: return expm1_d(x, y, n);
    case VFn::kTanh: return tanh_d(x, y, n);
    case VFn::kLogistic:  // 1 / (1 + exp(-x))
      guarded_exp<double>(x, y, n, -1.0, exp_d);
      return recip_one_plus_d(y, y, n);
    case VFn::kSin: return sin_d(x, y, n);
    case VFn::kCos: return cos_d(x, y, n);
    case VFn::kSqrt: return sqrt_d(x, y, n);
    case VFn::kRsqrt: return rsqrt_d(x, y, n);
  }
}

void vpow(const float* x, const float* y, float* out, int64_t n) { pow_f(x, y, out, n); }
void vpow(const double* x, const double* y, double* out, int64_t n) { pow_d(x, y, out, n); }

}  // namespace mcx::cpu
