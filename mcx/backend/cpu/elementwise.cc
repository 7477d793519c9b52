// Element-wise kernels (see elementwise.h). Transcendentals of float/double go to vmath (libmvec);
// everything else is a plain loop that GCC vectorises at -O3.
#pragma GCC optimize("O3")

#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/multiversion.h"

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "mcx/backend/cpu/vmath.h"
#include "mcx/core/special_functions.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;

[[noreturn]] void unsupported(OpKind k, DType t) {
  throw std::logic_error("[cpu] no element-wise kernel for op " + std::to_string(static_cast<int>(k)) +
                         " on " + std::string(dtype_short_name(t)));
}

template <typename T> constexpr bool kFloat = std::is_floating_point_v<T>;
template <typename T> constexpr bool kBool = std::is_same_v<T, bool>;
template <typename T> constexpr bool kInt = std::is_integral_v<T> && !kBool<T>;

// Wrapping integer arithmetic (signed overflow is defined as two's complement wrap, as in XLA).
template <typename T> inline T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T> inline T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename T> inline T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // avoid int promotion
  return static_cast<T>(static_cast<U>(static_cast<W>(a) * static_cast<W>(b)));
}

template <typename T> inline T max_nan(T a, T b) {
  if constexpr (kFloat<T>) return (a != a) ? a : ((b != b) ? b : (a > b ? a : b));
  else return a > b ? a : b;
}
template <typename T> inline T min_nan(T a, T b) {
  if constexpr (kFloat<T>) return (a != a) ? a : ((b != b) ? b : (a < b ? a : b));
  else return a < b ? a : b;
}

template <typename T> inline T int_div(T a, T b) {
  if (b == 0) return static_cast<T>(-1);
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return a;
  }
  return static_cast<T>(a / b);
}
template <typename T> inline T int_rem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == -1) return 0;
  }
  return static_cast<T>(a % b);
}
template <typename T> inline T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
      return 0;
    }
  }
  T result = 1;
  while (exp != 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp = static_cast<T>(exp >> 1);
  }
  return result;
}

template <typename T, typename F>
inline void map1(const T* x, T* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <typename T, typename R, typename F>
inline void map2(const T* a, const T* b, R* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}

template <typename T>
void unary(OpKind k, const T* x, T* y, int64_t n) {
  if constexpr (kFloat<T>) {
    switch (k) {
      case OpKind::kExp: return vmath(VFn::kExp, x, y, n);
      case OpKind::kLog: return vmath(VFn::kLog, x, y, n);
      case OpKind::kLog1p: return vmath(VFn::kLog1p, x, y, n);
      case OpKind::kExpm1: return vmath(VFn::kExpm1, x, y, n);
      case OpKind::kTanh: return vmath(VFn::kTanh, x, y, n);
      case OpKind::kLogistic: return vmath(VFn::kLogistic, x, y, n);
      case OpKind::kSin: return vmath(VFn::kSin, x, y, n);
      case OpKind::kCos: return vmath(VFn::kCos, x, y, n);
      case OpKind::kErf: return map1(x, y, n, [](T v) { return std::erf(v); });
      case OpKind::kErfc: return map1(x, y, n, [](T v) { return std::erfc(v); });
      case OpKind::kErfInv:
        return map1(x, y, n, [](T v) { return static_cast<T>(erf_inv(static_cast<double>(v))); });
      case OpKind::kSqrt: return vmath(VFn::kSqrt, x, y, n);
      case OpKind::kRsqrt: return vmath(VFn::kRsqrt, x, y, n);
      case OpKind::kFloor: return map1(x, y, n, [](T v) { return std::floor(v); });
      case OpKind::kCeil: return map1(x, y, n, [](T v) { return std::ceil(v); });
      case OpKind::kRound: return map1(x, y, n, [](T v) { return std::round(v); });
      case OpKind::kNeg: return map1(x, y, n, [](T v) { return -v; });
      case OpKind::kAbs: return map1(x, y, n, [](T v) { return std::fabs(v); });
      case OpKind::kSign:
        return map1(x, y, n, [](T v) { return v > 0 ? T(1) : (v < 0 ? T(-1) : v); });
      case OpKind::kStopGradient:
      case OpKind::kRematBarrier: return map1(x, y, n, [](T v) { return v; });
      default: break;
    }
  } else if constexpr (kInt<T>) {
    switch (k) {
      case OpKind::kNeg: return map1(x, y, n, [](T v) { return wrap_sub(T(0), v); });
      case OpKind::kAbs:
        return map1(x, y, n, [](T v) {
          if constexpr (std::is_signed_v<T>) return v < 0 ? wrap_sub(T(0), v) : v;
          else return v;
        });
      case OpKind::kSign:
        return map1(x, y, n, [](T v) { return static_cast<T>((v > 0) - (v < T(0))); });
      case OpKind::kNot: return map1(x, y, n, [](T v) { return static_cast<T>(~v); });
      case OpKind::kStopGradient:
      case OpKind::kRematBarrier: return map1(x, y, n, [](T v) { return v; });
      default: break;
    }
  } else {  // bool
    switch (k) {
      case OpKind::kNot: return map1(x, y, n, [](T v) { return !v; });
      case OpKind::kAbs:
      case OpKind::kSign:
      case OpKind::kStopGradient:
      case OpKind::kRematBarrier: return map1(x, y, n, [](T v) { return v; });
      default: break;
    }
  }
  unsupported(k, dtype_v<T>);
}

// The hot float/double arithmetic loops, compiled for AVX-512, AVX2 and the baseline ISA; the loader
// picks the best clone for the machine (ifunc), so the binary stays portable without -march=native.
#define MCX_MULTIVERSION MCX_TARGET_CLONES
#define MCX_BINARY_LOOP(name, T, expr)                                        \
  MCX_MULTIVERSION void name(const T* a, const T* b, T* y, int64_t n) {      \
    for (int64_t i = 0; i < n; ++i) {                                         \
      const T u = a[i], v = b[i];                                             \
      y[i] = (expr);                                                          \
    }                                                                         \
  }
#define MCX_FLOAT_LOOPS(T)                                                    \
  MCX_BINARY_LOOP(simd_add, T, u + v)                                         \
  MCX_BINARY_LOOP(simd_sub, T, u - v)                                         \
  MCX_BINARY_LOOP(simd_mul, T, u * v)                                         \
  MCX_BINARY_LOOP(simd_div, T, u / v)                                         \
  MCX_BINARY_LOOP(simd_max, T, max_nan(u, v))                                 \
  MCX_BINARY_LOOP(simd_min, T, min_nan(u, v))
MCX_FLOAT_LOOPS(float)
MCX_FLOAT_LOOPS(double)
#undef MCX_FLOAT_LOOPS
#undef MCX_BINARY_LOOP

// Comparisons (bool results) and select: relu's mask and its gradient in every MLP step.
#define MCX_COMPARE_LOOP(name, T, expr)                                       \
  MCX_MULTIVERSION void name(const T* a, const T* b, bool* y, int64_t n) {   \
    for (int64_t i = 0; i < n; ++i) {                                         \
      const T u = a[i], v = b[i];                                             \
      y[i] = (expr);                                                          \
    }                                                                         \
  }
#define MCX_FLOAT_COMPARES(T)                                                 \
  MCX_COMPARE_LOOP(simd_eq, T, u == v)                                        \
  MCX_COMPARE_LOOP(simd_ne, T, u != v)                                        \
  MCX_COMPARE_LOOP(simd_lt, T, u < v)                                         \
  MCX_COMPARE_LOOP(simd_le, T, u <= v)                                        \
  MCX_COMPARE_LOOP(simd_gt, T, u > v)                                         \
  MCX_COMPARE_LOOP(simd_ge, T, u >= v)                                        \
  MCX_MULTIVERSION void simd_select(const bool* p, const T* a, const T* b, T* y, int64_t n) { \
    using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;         \
    for (int64_t i = 0; i < n; ++i) { /* bitwise blend: no branch, vectorises */ \
      const U m = U(0) - static_cast<U>(p[i]);                                \
      y[i] = std::bit_cast<T>((std::bit_cast<U>(a[i]) & m) | (std::bit_cast<U>(b[i]) & ~m)); \
    }                                                                         \
  }
MCX_FLOAT_COMPARES(float)
MCX_FLOAT_COMPARES(double)
#undef MCX_FLOAT_COMPARES
#undef MCX_COMPARE_LOOP

// Dispatches float/double arithmetic to the multiversioned loops; false for other ops.
template <typename T>
bool binary_simd(OpKind k, const T* a, const T* b, T* y, int64_t n) {
  switch (k) {
    case OpKind::kAdd: simd_add(a, b, y, n); return true;
    case OpKind::kSub: simd_sub(a, b, y, n); return true;
    case OpKind::kMul: simd_mul(a, b, y, n); return true;
    case OpKind::kDiv: simd_div(a, b, y, n); return true;
    case OpKind::kMax: simd_max(a, b, y, n); return true;
    case OpKind::kMin: simd_min(a, b, y, n); return true;
    default: return false;
  }
}

template <typename T>
void binary(OpKind k, const T* a, const T* b, T* y, int64_t n) {
  if constexpr (kFloat<T>) {
    if (binary_simd(k, a, b, y, n)) return;
  }
  switch (k) {
    case OpKind::kMax: return map2(a, b, y, n, [](T u, T v) { return max_nan(u, v); });
    case OpKind::kMin: return map2(a, b, y, n, [](T u, T v) { return min_nan(u, v); });
    default: break;
  }
  if constexpr (kFloat<T>) {
    switch (k) {
      case OpKind::kAdd: return map2(a, b, y, n, [](T u, T v) { return u + v; });
      case OpKind::kSub: return map2(a, b, y, n, [](T u, T v) { return u - v; });
      case OpKind::kMul: return map2(a, b, y, n, [](T u, T v) { return u * v; });
      case OpKind::kDiv: return map2(a, b, y, n, [](T u, T v) { return u / v; });
      case OpKind::kRem: return map2(a, b, y, n, [](T u, T v) { return std::fmod(u, v); });
      case OpKind::kPow: return vpow(a, b, y, n);
      default: break;
    }
  } else if constexpr (kInt<T>) {
    switch (k) {
      case OpKind::kAdd: return map2(a, b, y, n, [](T u, T v) { return wrap_add(u, v); });
      case OpKind::kSub: return map2(a, b, y, n, [](T u, T v) { return wrap_sub(u, v); });
      case OpKind::kMul: return map2(a, b, y, n, [](T u, T v) { return wrap_mul(u, v); });
      case OpKind::kDiv: return map2(a, b, y, n, [](T u, T v) { return int_div(u, v); });
      case OpKind::kRem: return map2(a, b, y, n, [](T u, T v) { return int_rem(u, v); });
      case OpKind::kPow: return map2(a, b, y, n, [](T u, T v) { return int_pow(u, v); });
      case OpKind::kAnd: return map2(a, b, y, n, [](T u, T v) { return static_cast<T>(u & v); });
      case OpKind::kOr: return map2(a, b, y, n, [](T u, T v) { return static_cast<T>(u | v); });
      case OpKind::kXor: return map2(a, b, y, n, [](T u, T v) { return static_cast<T>(u ^ v); });
      default: break;
    }
  } else {  // bool: arithmetic in {0, 1} saturated to bool
    switch (k) {
      case OpKind::kAdd:
      case OpKind::kOr: return map2(a, b, y, n, [](T u, T v) { return u || v; });
      case OpKind::kMul:
      case OpKind::kAnd: return map2(a, b, y, n, [](T u, T v) { return u && v; });
      case OpKind::kSub:
      case OpKind::kXor:
      case OpKind::kNe: return map2(a, b, y, n, [](T u, T v) { return u != v; });
      default: break;
    }
  }
  unsupported(k, dtype_v<T>);
}

template <typename T>
void compare(OpKind k, const T* a, const T* b, bool* y, int64_t n) {
  if constexpr (kFloat<T>) {
    switch (k) {
      case OpKind::kEq: return simd_eq(a, b, y, n);
      case OpKind::kNe: return simd_ne(a, b, y, n);
      case OpKind::kLt: return simd_lt(a, b, y, n);
      case OpKind::kLe: return simd_le(a, b, y, n);
      case OpKind::kGt: return simd_gt(a, b, y, n);
      case OpKind::kGe: return simd_ge(a, b, y, n);
      default: break;
    }
  }
  switch (k) {
    case OpKind::kEq: return map2(a, b, y, n, [](T u, T v) { return u == v; });
    case OpKind::kNe: return map2(a, b, y, n, [](T u, T v) { return u != v; });
    case OpKind::kLt: return map2(a, b, y, n, [](T u, T v) { return u < v; });
    case OpKind::kLe: return map2(a, b, y, n, [](T u, T v) { return u <= v; });
    case OpKind::kGt: return map2(a, b, y, n, [](T u, T v) { return u > v; });
    case OpKind::kGe: return map2(a, b, y, n, [](T u, T v) { return u >= v; });
    default: break;
  }
  unsupported(k, dtype_v<T>);
}

// Value conversion with the float -> integer cases made total: NaN -> 0, out of range saturates.
template <typename To, typename From>
inline To convert_value(From v) {
  if constexpr (kBool<To>) {
    return v != From(0);
  } else if constexpr (kFloat<From> && kInt<To>) {
    if (v != v) return 0;
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    double d = static_cast<double>(v);
    if (d <= lo) return std::numeric_limits<To>::min();
    if (d >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From>
void convert(const From* x, To* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = convert_value<To>(x[i]);
}

// Calls f(T{}) with T the compute type of dtype t.
template <typename F>
decltype(auto) dispatch_compute(DType t, F&& f) {
  return dispatch_dtype(compute_dtype(t), [&](auto v) -> decltype(auto) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) return f(float{});
    else return f(T{});
  });
}

}  // namespace

void eval_node(const FusedNode& node, const void* const* args, void* out, int64_t n) {
  const OpKind k = node.kind;
  switch (k) {
    case OpKind::kConvert:
      dispatch_compute(node.operand_dtype, [&](auto from) {
        using F = decltype(from);
        dispatch_compute(node.dtype, [&](auto to) {
          using T = decltype(to);
          convert(static_cast<const F*>(args[0]), static_cast<T*>(out), n);
        });
      });
      return;
    case OpKind::kIsFinite:
      dispatch_compute(node.operand_dtype, [&](auto v) {
        using T = decltype(v);
        const T* x = static_cast<const T*>(args[0]);
        bool* y = static_cast<bool*>(out);
        if constexpr (kFloat<T>) {
          for (int64_t i = 0; i < n; ++i) y[i] = std::isfinite(x[i]);
        } else {
          unsupported(k, node.operand_dtype);
        }
      });
      return;
    case OpKind::kEq: case OpKind::kNe: case OpKind::kLt:
    case OpKind::kLe: case OpKind::kGt: case OpKind::kGe:
      dispatch_compute(node.operand_dtype, [&](auto v) {
        using T = decltype(v);
        compare(k, static_cast<const T*>(args[0]), static_cast<const T*>(args[1]), static_cast<bool*>(out), n);
      });
      return;
    case OpKind::kSelect:
      dispatch_compute(node.dtype, [&](auto v) {
        using T = decltype(v);
        const bool* p = static_cast<const bool*>(args[0]);
        const T* a = static_cast<const T*>(args[1]);
        const T* b = static_cast<const T*>(args[2]);
        T* y = static_cast<T*>(out);
        if constexpr (kFloat<T>) simd_select(p, a, b, y, n);
        else for (int64_t i = 0; i < n; ++i) {
          const T u = a[i], w = b[i];
          y[i] = p[i] ? u : w;
        }
      });
      return;
    case OpKind::kClamp:
      dispatch_compute(node.dtype, [&](auto v) {
        using T = decltype(v);
        const T* lo = static_cast<const T*>(args[0]);
        const T* x = static_cast<const T*>(args[1]);
        const T* hi = static_cast<const T*>(args[2]);
        T* y = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) y[i] = min_nan(max_nan(x[i], lo[i]), hi[i]);
      });
      return;
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kDiv: case OpKind::kRem:
    case OpKind::kPow: case OpKind::kMax: case OpKind::kMin: case OpKind::kAnd: case OpKind::kOr:
    case OpKind::kXor:
      dispatch_compute(node.dtype, [&](auto v) {
        using T = decltype(v);
        binary(k, static_cast<const T*>(args[0]), static_cast<const T*>(args[1]), static_cast<T*>(out), n);
      });
      return;
    default:
      dispatch_compute(node.dtype, [&](auto v) {
        using T = decltype(v);
        unary(k, static_cast<const T*>(args[0]), static_cast<T*>(out), n);
      });
      return;
  }
}

void round_to_storage(DType dtype, float* v, int64_t n) {
  if (dtype == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) v[i] = half_to_float(float_to_half(v[i]));
  } else if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) v[i] = bfloat16_to_float(float_to_bfloat16(v[i]));
  }
}

void load_compute(DType dtype, const void* src, void* dst, int64_t n) {
  dispatch_dtype(dtype, [&](auto v) {
    using S = decltype(v);
    const S* s = static_cast<const S*>(src);
    auto* d = static_cast<compute_t<S>*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = to_compute(s[i]);
  });
}

void store_compute(DType dtype, const void* src, void* dst, int64_t n) {
  dispatch_dtype(dtype, [&](auto v) {
    using S = decltype(v);
    const auto* s = static_cast<const compute_t<S>*>(src);
    S* d = static_cast<S*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = from_compute<S>(s[i]);
  });
}

bool elementwise_supported(ir::OpKind kind, DType result, DType operand) {
  // Probe the kernel on one element: cheap, and keeps the table of supported combinations in one place.
  alignas(8) unsigned char a[8] = {}, b[8] = {}, c[8] = {}, out[8] = {};
  const void* args[3] = {a, b, c};
  FusedNode node{kind, result, operand, {}};
  try {
    eval_node(node, args, out, 1);
  } catch (const std::logic_error&) {
    return false;
  }
  return true;
}

}  // namespace mcx::cpu
