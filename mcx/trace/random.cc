#include "mcx/trace/random.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "mcx/core/error.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/trace/dispatch.h"

namespace mcx::random {
namespace {

using ir::Attrs;
using ir::OpKind;
using Dims = std::vector<int64_t>;

// ---- small op builders over bind() (operands already have identical shapes and dtypes) -------------

Array scalar(DType t, double v) {
  Buffer b = dispatch_dtype(t, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      return Buffer::scalar<T>(T(static_cast<float>(v)));
    } else {
      return Buffer::scalar<T>(static_cast<T>(v));
    }
  });
  return Array(std::move(b));
}

Array full(DType t, const Dims& dims, double v) {
  Array s = scalar(t, v);
  if (dims.empty()) return s;
  return bind(OpKind::kBroadcastInDim, {s},
              Attrs{{"shape", concrete_shape(dims)}, {"broadcast_dimensions", Dims{}}});
}
Array full_like(const Array& x, double v) { return full(x.dtype(), x.dims(), v); }

Array iota(DType t, const Dims& dims, int64_t dimension) {
  return bind(OpKind::kIota, {}, Attrs{{"dtype", t}, {"shape", concrete_shape(dims)}, {"dimension", dimension}});
}
Array reshape(const Array& x, const Dims& dims) {
  return bind(OpKind::kReshape, {x}, Attrs{{"shape", concrete_shape(dims)}});
}
Array convert(const Array& x, DType t) {
  if (x.dtype() == t) return x;
  return bind(OpKind::kConvert, {x}, Attrs{{"dtype", t}});
}
Array column(const Array& x2, int64_t col) {  // x2: [n, 2] -> [n]
  int64_t n = x2.dim(0);
  Array c = bind(OpKind::kSlice, {x2},
                 Attrs{{"start", concrete_shape({0, col})}, {"limit", concrete_shape({n, col + 1})},
                       {"strides", Dims{1, 1}}});
  return reshape(c, {n});
}
Array binary(OpKind k, const Array& x, const Array& y) { return bind(k, {x, y}); }
Array binary(OpKind k, const Array& x, double y) { return bind(k, {x, full_like(x, y)}); }
Array unary(OpKind k, const Array& x) { return bind(k, {x}); }

int64_t checked_size(const char* api, const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      throw InvalidArgument(std::string("[random.") + api + "] expected non-negative dimensions; found " +
                            shape_to_string(concrete_shape(shape)));
    }
    n *= d;
  }
  if (n > int64_t{std::numeric_limits<uint32_t>::max()}) {
    throw InvalidArgument(std::string("[random.") + api + "] expected at most 2^32 - 1 elements; found " +
                          std::to_string(n));
  }
  return n;
}

void check_key(const char* api, const Array& key) {
  if (!key.valid() || key.dtype() != DType::kUInt32 || key.ndim() != 1 || key.dim(0) != 2) {
    throw InvalidArgument(std::string("[random.") + api + "] expected a key u32[2] (from random::key); found " +
                          (key.valid() ? key.aval().to_string() : std::string("an empty Array")));
  }
}

void check_float(const char* api, DType t) {
  if (!is_floating(t)) {
    throw InvalidArgument(std::string("[random.") + api + "] expected a floating dtype (f16, bf16, f32, f64); found " +
                          std::string(dtype_name(t)));
  }
}

// threefry2x32 of key over the counters (0, i) for i in [0, n): u32[n, 2]. JAX's iota_2x32_shape gives
// (hi, lo) of the 64-bit row-major index; hi is 0 because n < 2^32.
Array threefry_counters(const Array& key, int64_t n) {
  Array counts = bind(OpKind::kConcatenate, {full(DType::kUInt32, {n, 1}, 0), iota(DType::kUInt32, {n, 1}, 0)},
                      Attrs{{"dimension", int64_t{1}}});
  return bind(OpKind::kThreefry2x32, {key, counts});
}

// Both output words of the threefry blocks for shape (each u32[shape]).
std::pair<Array, Array> threefry_words(const Array& key, const Dims& shape, int64_t n) {
  Array y = threefry_counters(key, n);
  return {reshape(column(y, 0), shape), reshape(column(y, 1), shape)};
}

// Floats in [0, 1) of dtype t with JAX's mantissa-fill method, as values (no bitcast op): the mantissa
// m = bits >> (rng_bits - nmant) gives 1 + m * 2^-nmant, and subtracting 1 leaves m * 2^-nmant exactly.
Array unit_floats(const Array& key, const Dims& shape, DType t) {
  int64_t n = checked_size("uniform", shape);
  if (n == 0) return full(t, shape, 0.0);
  auto [y0, y1] = threefry_words(key, shape, n);
  if (t == DType::kFloat64) {
    // 64 random bits are (y0 << 32) | y1; the 52-bit mantissa is y0 * 2^20 + (y1 >> 12), exact in f64.
    Array hi = binary(OpKind::kMul, convert(y0, DType::kFloat64), std::ldexp(1.0, 20));
    Array lo = convert(binary(OpKind::kDiv, y1, 4096.0), DType::kFloat64);
    return binary(OpKind::kMul, binary(OpKind::kAdd, hi, lo), std::ldexp(1.0, -52));
  }
  Array bits = binary(OpKind::kXor, y0, y1);
  int rng_bits = 32, nmant = 23;
  if (t == DType::kFloat16) {
    rng_bits = 16;
    nmant = 10;
  } else if (t == DType::kBFloat16) {
    rng_bits = 8;  // JAX draws 8 bits when nmant < 8
    nmant = 7;
  }
  if (rng_bits < 32) bits = binary(OpKind::kRem, bits, std::ldexp(1.0, rng_bits));  // the low rng_bits
  Array m = binary(OpKind::kDiv, bits, std::ldexp(1.0, rng_bits - nmant));
  Array f = binary(OpKind::kMul, convert(m, DType::kFloat32), std::ldexp(1.0, -nmant));  // exact
  return convert(f, t);
}

}  // namespace

Array key(uint64_t seed) {
  return Array(Buffer::from_vector<uint32_t>(
      {static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed & 0xffffffffu)}, {2}));
}

Array split(const Array& key, int64_t n) {
  check_key("split", key);
  checked_size("split", {n});
  if (n == 0) return full(DType::kUInt32, {0, 2}, 0);
  return threefry_counters(key, n);
}

std::vector<Array> split_keys(const Array& key, int64_t n) {
  Array keys = split(key, n);
  std::vector<Array> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    Array row = bind(OpKind::kSlice, {keys},
                     Attrs{{"start", concrete_shape({i, 0})}, {"limit", concrete_shape({i + 1, 2})},
                           {"strides", Dims{1, 1}}});
    out.push_back(reshape(row, {2}));
  }
  return out;
}

Array fold_in(const Array& key, uint32_t data) {
  return fold_in(key, Array(Buffer::scalar<uint32_t>(data)));
}

Array fold_in(const Array& key, const Array& data) {
  check_key("fold_in", key);
  if (!data.valid() || data.ndim() != 0 || !(is_integer(data.dtype()) || is_bool(data.dtype()))) {
    throw InvalidArgument("[random.fold_in] expected an integer scalar to fold in; found " +
                          (data.valid() ? data.aval().to_string() : std::string("an empty Array")));
  }
  // JAX: threefry_2x32(key, threefry_seed(u32(data))) = one block over the pair (0, data).
  Array d = reshape(convert(data, DType::kUInt32), {1, 1});
  Array counts = bind(OpKind::kConcatenate, {full(DType::kUInt32, {1, 1}, 0), d}, Attrs{{"dimension", int64_t{1}}});
  return reshape(bind(OpKind::kThreefry2x32, {key, counts}), {2});
}

Array random_bits(const Array& key, const Dims& shape) {
  check_key("random_bits", key);
  int64_t n = checked_size("random_bits", shape);
  if (n == 0) return full(DType::kUInt32, shape, 0);
  auto [y0, y1] = threefry_words(key, shape, n);
  return binary(OpKind::kXor, y0, y1);
}

Array uniform(const Array& key, const Dims& shape, DType dtype, double minval, double maxval) {
  check_key("uniform", key);
  check_float("uniform", dtype);
  if (!(minval <= maxval)) {
    throw InvalidArgument("[random.uniform] expected minval <= maxval; found minval " + std::to_string(minval) +
                          ", maxval " + std::to_string(maxval));
  }
  Array u = unit_floats(key, shape, dtype);
  // floats * 1 + 0 and max(0, floats) are the identity, so the default bounds skip three ops.
  if (minval == 0.0 && maxval == 1.0) return u;
  Array lo = full(dtype, shape, minval);
  Array span = binary(OpKind::kSub, full(dtype, shape, maxval), lo);
  return binary(OpKind::kMax, lo, binary(OpKind::kAdd, binary(OpKind::kMul, u, span), lo));
}

Array erf_inv(const Array& x_in) {
  check_float("erf_inv", x_in.dtype());
  DType ct = x_in.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  Array x = convert(x_in, ct);
  // XLA's ErfInv32 (M. Giles, "Approximating the erfinv function"): w = -log(1 - x^2); a degree-8
  // polynomial in w - 2.5 for w < 5 and in sqrt(w) - 3 otherwise, times x.
  static constexpr double kSmall[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06,
                                      -4.39150654e-06, 0.00021858087,  -0.00125372503,
                                      -0.00417768164,  0.246640727,    1.50140941};
  static constexpr double kBig[] = {-0.000200214257, 0.000100950558, 0.00134934322,
                                    -0.00367342844,  0.00573950773,  -0.0076224613,
                                    0.00943887047,   1.00167406,     2.83297682};
  Array w = unary(OpKind::kNeg, unary(OpKind::kLog1p, unary(OpKind::kNeg, binary(OpKind::kMul, x, x))));
  Array small = binary(OpKind::kLt, w, 5.0);
  Array t = bind(OpKind::kSelect, {small, binary(OpKind::kSub, w, 2.5),
                                   binary(OpKind::kSub, unary(OpKind::kSqrt, w), 3.0)});
  auto coeff = [&](int i) { return bind(OpKind::kSelect, {small, full_like(x, kSmall[i]), full_like(x, kBig[i])}); };
  Array p = coeff(0);
  for (int i = 1; i < 9; ++i) p = binary(OpKind::kAdd, coeff(i), binary(OpKind::kMul, p, t));
  Array r = binary(OpKind::kMul, p, x);
  Array at_one = binary(OpKind::kEq, unary(OpKind::kAbs, x), 1.0);
  r = bind(OpKind::kSelect, {at_one, binary(OpKind::kMul, x, std::numeric_limits<double>::infinity()), r});
  return convert(r, x_in.dtype());
}

Array normal(const Array& key, const Dims& shape, DType dtype) {
  check_key("normal", key);
  check_float("normal", dtype);
  if (dtype == DType::kFloat64) {
    // Box-Muller: r = sqrt(-2 log(1 - u1)) with 1 - u1 in (0, 1], angle 2 pi u2.
    std::vector<Array> ks = split_keys(key, 2);
    Array u1 = uniform(ks[0], shape, dtype);
    Array u2 = uniform(ks[1], shape, dtype);
    Array one_minus = binary(OpKind::kSub, full_like(u1, 1.0), u1);
    Array r = unary(OpKind::kSqrt, binary(OpKind::kMul, unary(OpKind::kLog, one_minus), -2.0));
    Array c = unary(OpKind::kCos, binary(OpKind::kMul, u2, 2.0 * std::numbers::pi));
    return binary(OpKind::kMul, r, c);
  }
  // JAX: u uniform in [nextafter(-1, 0), 1), then sqrt(2) * erf_inv(u).
  int nmant = dtype == DType::kFloat16 ? 10 : dtype == DType::kBFloat16 ? 7 : 23;
  double lo = -1.0 + std::ldexp(1.0, -(nmant + 1));
  Array u = uniform(key, shape, dtype, lo, 1.0);
  return binary(OpKind::kMul, erf_inv(u), std::numbers::sqrt2);
}

Array bernoulli(const Array& key, double p, const Dims& shape) {
  check_key("bernoulli", key);
  if (!(p >= 0.0 && p <= 1.0)) {
    throw InvalidArgument("[random.bernoulli] expected 0 <= p <= 1; found " + std::to_string(p));
  }
  return binary(OpKind::kLt, uniform(key, shape, DType::kFloat32), p);
}

Array permutation(const Array& key, int64_t n) {
  check_key("permutation", key);
  checked_size("permutation", {n});
  if (n == 0) return full(DType::kInt32, {0}, 0);
  // JAX's _shuffle: ceil(3 ln n / ln(2^32 - 1)) rounds, each sorting the indices by 32-bit random keys drawn
  // from the second half of a split (the first half carries to the next round).
  const int rounds =
      static_cast<int>(std::ceil(3.0 * std::log(static_cast<double>(n)) / std::log(4294967295.0)));
  Array x = iota(DType::kInt32, {n}, 0);
  Array k = key;
  for (int r = 0; r < rounds; ++r) {
    std::vector<Array> halves = split_keys(k, 2);
    k = halves[0];
    Array order = bind(OpKind::kArgsort, {random_bits(halves[1], {n})},
                       Attrs{{"dimension", int64_t{0}}, {"descending", int64_t{0}}});
    x = bind(OpKind::kTake, {x, order});
  }
  return x;
}

}  // namespace mcx::random
