// Element types and the promotion lattice.
//
// Promotion (docs/dtypes.md) follows JAX's lattice without weak types except for Python-like scalars:
//   bool < uint8 < uint32;  bool < int8 < int16 < int32 < int64;  uint8 < int16;  uint32 < int64;
//   any integer < float16/bfloat16 < float32 < float64;  float16 with bfloat16 -> float32.
// promote_types(a, b) is the least upper bound; it is commutative and associative.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mcx {

enum class DType : uint8_t {
  kBool = 0,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt32,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};
inline constexpr int kNumDTypes = 11;

// Short names used by the IR printer and error messages: "bool", "i8", "i16", "i32", "i64", "u8", "u32",
// "f16", "bf16", "f32", "f64".
std::string_view dtype_short_name(DType t);
// Long names: "bool", "int8", ..., "float16", "bfloat16", "float32", "float64".
std::string_view dtype_name(DType t);
// Accepts either the short or the long name; an unknown name is InvalidArgument listing the valid ones.
absl::StatusOr<DType> parse_dtype(std::string_view name);

int dtype_size(DType t);  // bytes per element
bool is_floating(DType t);
bool is_integer(DType t);  // signed or unsigned, not bool
bool is_signed_integer(DType t);
bool is_unsigned_integer(DType t);
inline bool is_bool(DType t) { return t == DType::kBool; }

// Least upper bound in the lattice above.
DType promote_types(DType a, DType b);

// IEEE binary16 and bfloat16 storage types. Arithmetic goes through float.
struct float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  explicit float16_t(float f);
  explicit operator float() const;
};
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  explicit bfloat16_t(float f);  // round to nearest even; NaN stays NaN
  explicit operator float() const;
};

float half_to_float(uint16_t bits);
uint16_t float_to_half(float f);  // round to nearest even, overflow to inf
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float f);

// Maps C++ types to DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::kBool; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::kUInt32; };
template <> struct dtype_of<float16_t> { static constexpr DType value = DType::kFloat16; };
template <> struct dtype_of<bfloat16_t> { static constexpr DType value = DType::kBFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::kFloat32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::kFloat64; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of dtype t (bool, int8_t, ..., float16_t, bfloat16_t, float, double).
template <typename F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::kBool: return f(bool{});
    case DType::kInt8: return f(int8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kFloat16: return f(float16_t{});
    case DType::kBFloat16: return f(bfloat16_t{});
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: break;
  }
  return f(double{});
}

}  // namespace mcx
