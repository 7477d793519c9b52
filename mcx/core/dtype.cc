#include "mcx/core/dtype.h"

#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace mcx {
namespace {

struct DTypeInfo {
  std::string_view short_name;
  std::string_view name;
  int size;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {"bool", "bool", 1},
    {"i8", "int8", 1},
    {"i16", "int16", 2},
    {"i32", "int32", 4},
    {"i64", "int64", 8},
    {"u8", "uint8", 1},
    {"u32", "uint32", 4},
    {"f16", "float16", 2},
    {"bf16", "bfloat16", 2},
    {"f32", "float32", 4},
    {"f64", "float64", 8},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }

// The promotion lattice as a reflexive-transitive "<=" relation, built from the covering edges of
// dtype.h, and the join table derived from it (least element of the common upper bounds).
struct PromotionTable {
  bool le[kNumDTypes][kNumDTypes] = {};
  DType join[kNumDTypes][kNumDTypes] = {};

  PromotionTable() {
    using D = DType;
    const std::pair<D, D> edges[] = {
        {D::kBool, D::kUInt8},    {D::kUInt8, D::kUInt32},    {D::kBool, D::kInt8},
        {D::kInt8, D::kInt16},    {D::kInt16, D::kInt32},     {D::kInt32, D::kInt64},
        {D::kUInt8, D::kInt16},   {D::kUInt32, D::kInt64},    {D::kInt64, D::kFloat16},
        {D::kInt64, D::kBFloat16}, {D::kFloat16, D::kFloat32}, {D::kBFloat16, D::kFloat32},
        {D::kFloat32, D::kFloat64},
    };
    for (int i = 0; i < kNumDTypes; ++i) le[i][i] = true;
    for (auto [a, b] : edges) le[static_cast<int>(a)][static_cast<int>(b)] = true;
    for (int k = 0; k < kNumDTypes; ++k)
      for (int i = 0; i < kNumDTypes; ++i)
        for (int j = 0; j < kNumDTypes; ++j)
          if (le[i][k] && le[k][j]) le[i][j] = true;
    for (int a = 0; a < kNumDTypes; ++a) {
      for (int b = 0; b < kNumDTypes; ++b) {
        int best = -1;
        for (int c = 0; c < kNumDTypes; ++c) {
          if (!le[a][c] || !le[b][c]) continue;
          if (best < 0 || le[c][best]) best = c;
        }
        join[a][b] = static_cast<DType>(best);  // float64 is above everything, so best >= 0
      }
    }
  }
};

const PromotionTable& promotion_table() {
  static const PromotionTable table;
  return table;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

std::string_view dtype_short_name(DType t) { return info(t).short_name; }
std::string_view dtype_name(DType t) { return info(t).name; }
int dtype_size(DType t) { return info(t).size; }

absl::StatusOr<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].short_name == name || kInfo[i].name == name) return static_cast<DType>(i);
  }
  std::string valid;
  for (int i = 0; i < kNumDTypes; ++i) {
    absl::StrAppend(&valid, i ? ", " : "", std::string(kInfo[i].short_name), "/", std::string(kInfo[i].name));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[parse_dtype] unknown dtype '", std::string(name), "'; expected one of ", valid));
}

bool is_floating(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}
bool is_signed_integer(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
}
bool is_unsigned_integer(DType t) { return t == DType::kUInt8 || t == DType::kUInt32; }
bool is_integer(DType t) { return is_signed_integer(t) || is_unsigned_integer(t); }

DType promote_types(DType a, DType b) {
  return promotion_table().join[static_cast<int>(a)][static_cast<int>(b)];
}

// binary16: round to nearest even on the bit pattern; the subnormal range goes through one float
// addition whose hardware rounding (nearest even) does the work.
uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t out;
  if (x >= 0x47800000u) {  // >= 65536 (overflow after rounding), inf or NaN
    if (x > 0x7f800000u) {
      out = static_cast<uint16_t>(0x7e00u | ((x >> 13) & 0x3ffu));  // quiet NaN, keep top payload bits
    } else {
      out = 0x7c00u;
    }
  } else if (x < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    const uint32_t magic = (127 - 15 + 23 - 10 + 1) << 23;  // 0.5 in the half's subnormal ulp scale
    float g = bits_float(x) + bits_float(magic);
    out = static_cast<uint16_t>(float_bits(g) - magic);
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    x += mant_odd;
    out = static_cast<uint16_t>(x >> 13);  // may carry into the exponent: 65520..65535 -> inf
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);  // exact
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + bias) >> 16);
}

float bfloat16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

float16_t::float16_t(float f) : bits(float_to_half(f)) {}
float16_t::operator float() const { return half_to_float(bits); }
bfloat16_t::bfloat16_t(float f) : bits(float_to_bfloat16(f)) {}
bfloat16_t::operator float() const { return bfloat16_to_float(bits); }

}  // namespace mcx
