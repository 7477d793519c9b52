#include "mcx/core/dtype.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/core/python_helper.h"

namespace mcx {
namespace {

std::vector<DType> all_dtypes() {
  std::vector<DType> v;
  for (int i = 0; i < kNumDTypes; ++i) v.push_back(static_cast<DType>(i));
  return v;
}

TEST(DTypeTest, NamesParseAndSizes) {
  EXPECT_EQ(dtype_short_name(DType::kBFloat16), "bf16");
  EXPECT_EQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::kUInt32), "uint32");
  for (DType t : all_dtypes()) {
    EXPECT_EQ(*parse_dtype(dtype_short_name(t)), t);
    EXPECT_EQ(*parse_dtype(dtype_name(t)), t);
  }
  const int sizes[] = {1, 1, 2, 4, 8, 1, 4, 2, 2, 4, 8};
  for (DType t : all_dtypes()) EXPECT_EQ(dtype_size(t), sizes[static_cast<int>(t)]) << dtype_name(t);
  auto bad = parse_dtype("float128");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("float128"), std::string::npos);
  EXPECT_NE(std::string(bad.status().message()).find("bf16"), std::string::npos);
}

TEST(DTypeTest, Predicates) {
  EXPECT_TRUE(is_floating(DType::kBFloat16));
  EXPECT_FALSE(is_floating(DType::kInt32));
  EXPECT_TRUE(is_integer(DType::kUInt8));
  EXPECT_FALSE(is_integer(DType::kBool));
  EXPECT_TRUE(is_signed_integer(DType::kInt64));
  EXPECT_FALSE(is_signed_integer(DType::kUInt32));
  EXPECT_TRUE(is_unsigned_integer(DType::kUInt32));
  EXPECT_TRUE(is_bool(DType::kBool));
}

// The expected table written out by hand from the lattice in dtype.h / docs/dtypes.md.
TEST(DTypeTest, PromotionTableExact) {
  // Rows and columns: bool i8 i16 i32 i64 u8 u32 f16 bf16 f32 f64.
  const char* expected[kNumDTypes][kNumDTypes] = {
      {"bool", "i8", "i16", "i32", "i64", "u8", "u32", "f16", "bf16", "f32", "f64"},
      {"i8", "i8", "i16", "i32", "i64", "i16", "i64", "f16", "bf16", "f32", "f64"},
      {"i16", "i16", "i16", "i32", "i64", "i16", "i64", "f16", "bf16", "f32", "f64"},
      {"i32", "i32", "i32", "i32", "i64", "i32", "i64", "f16", "bf16", "f32", "f64"},
      {"i64", "i64", "i64", "i64", "i64", "i64", "i64", "f16", "bf16", "f32", "f64"},
      {"u8", "i16", "i16", "i32", "i64", "u8", "u32", "f16", "bf16", "f32", "f64"},
      {"u32", "i64", "i64", "i64", "i64", "u32", "u32", "f16", "bf16", "f32", "f64"},
      {"f16", "f16", "f16", "f16", "f16", "f16", "f16", "f16", "f32", "f32", "f64"},
      {"bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "bf16", "f32", "bf16", "f32", "f64"},
      {"f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f32", "f64"},
      {"f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64"},
  };
  for (DType a : all_dtypes()) {
    for (DType b : all_dtypes()) {
      EXPECT_EQ(dtype_short_name(promote_types(a, b)), expected[static_cast<int>(a)][static_cast<int>(b)])
          << dtype_name(a) << " with " << dtype_name(b);
    }
  }
}

TEST(DTypeTest, PromotionIsALattice) {
  for (DType a : all_dtypes()) {
    EXPECT_EQ(promote_types(a, a), a);
    EXPECT_EQ(promote_types(a, DType::kBool), a);
    EXPECT_EQ(promote_types(a, DType::kFloat64), DType::kFloat64);
    for (DType b : all_dtypes()) {
      EXPECT_EQ(promote_types(a, b), promote_types(b, a));
      for (DType c : all_dtypes()) {
        EXPECT_EQ(promote_types(promote_types(a, b), c), promote_types(a, promote_types(b, c)))
            << dtype_name(a) << " " << dtype_name(b) << " " << dtype_name(c);
      }
    }
  }
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(DTypeTest, HalfKnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);      // largest finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);      // below the midpoint to 65536
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);      // midpoint ties to even = inf
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // halfway to 0: even
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: even
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, even (up)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  const uint16_t nan = float_to_half(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(half_to_float(nan)));
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0xfc00), -INFINITY);
  EXPECT_EQ(static_cast<float>(float16_t(2.5f)), 2.5f);
}

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      EXPECT_EQ(float_to_half(f), h) << h;
    }
  }
}

// Independent reference: numpy's float32 -> float16 cast on random bit patterns and on the exact
// midpoints between neighbouring halves.
TEST(DTypeTest, HalfMatchesNumpy) {
  if (!testing::have_numpy()) GTEST_SKIP() << "numpy not available";
  testing::TempDir dir;
  std::vector<float> in;
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    in.push_back(f);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // midpoints of finite neighbours, both signs
    const double mid = (static_cast<double>(half_to_float(h)) + half_to_float(h + 1)) / 2;
    in.push_back(static_cast<float>(mid));
    in.push_back(static_cast<float>(-mid));
  }
  std::ofstream(dir.file("in.f32"), std::ios::binary)
      .write(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(float));
  ASSERT_EQ(testing::run_python(dir, R"(
import sys, numpy as np
d = sys.argv[1]
x = np.fromfile(d + '/in.f32', dtype='<f4')
with np.errstate(over='ignore'):
    x.astype('<f2').tofile(d + '/out.f2')
)"),
            0);
  std::vector<uint16_t> out(in.size());
  std::ifstream(dir.file("out.f2"), std::ios::binary)
      .read(reinterpret_cast<char*>(out.data()), out.size() * 2);
  int mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (float_to_half(in[i]) != out[i] && ++mismatches < 10) {
      ADD_FAILURE() << "float " << in[i] << " (bits " << std::hex << bits_of(in[i]) << "): mcx "
                    << float_to_half(in[i]) << " numpy " << out[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Reference bfloat16 rounding by choosing the nearer of the two truncation neighbours in double.
uint16_t reference_bf16(float f) {
  const uint32_t b = bits_of(f);
  const uint16_t lo = static_cast<uint16_t>(b >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double dlo = std::abs(static_cast<double>(bfloat16_to_float(lo)) - f);
  const double dhi = std::abs(static_cast<double>(from_bits(static_cast<uint32_t>(hi) << 16)) - f);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DTypeTest, BFloat16KnownPatternsAndRounding) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808000)), 0x3f80);  // tie, even (down)
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f818000)), 0x3f82);  // tie, even (up)
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(3.14159265f), 0x4049);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(float_to_bfloat16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(from_bits(0x7f800001)))));  // signalling
  EXPECT_EQ(bfloat16_to_float(0x4049), from_bits(0x40490000));
  EXPECT_EQ(static_cast<float>(bfloat16_t(1.5f)), 1.5f);
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f) || std::isinf(f) || (bits_of(f) & 0x7fffffff) >= 0x7f7f8000) continue;
    ASSERT_EQ(float_to_bfloat16(f), reference_bf16(f)) << std::hex << bits_of(f);
  }
}

TEST(DTypeTest, DispatchAndDTypeOf) {
  EXPECT_EQ(dtype_v<float16_t>, DType::kFloat16);
  EXPECT_EQ(dtype_v<uint32_t>, DType::kUInt32);
  for (DType t : all_dtypes()) {
    const int size = dispatch_dtype(t, [](auto tag) { return static_cast<int>(sizeof(tag)); });
    EXPECT_EQ(size, dtype_size(t)) << dtype_name(t);
    EXPECT_EQ(dispatch_dtype(t, [](auto tag) { return dtype_v<decltype(tag)>; }), t);
  }
}

}  // namespace
}  // namespace mcx
