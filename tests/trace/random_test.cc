// mcx::random against JAX's documented algorithms (jax/_src/prng.py, jax_threefry_partitionable=True, the
// default since JAX 0.5) and Random123's known-answer vectors. The expected values are computed here from
// the threefry block function of tests/support (itself checked against the Random123 vectors below), not
// from mcx's implementation.
#include "mcx/trace/random.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/ops.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx {
namespace {

using test::threefry2x32_block;

std::vector<uint32_t> u32s(const Array& a) {
  Buffer b = a.to_host();
  EXPECT_EQ(b.dtype(), DType::kUInt32);
  return std::vector<uint32_t>(b.data<uint32_t>(), b.data<uint32_t>() + b.num_elements());
}
std::vector<float> f32s(const Array& a) {
  Buffer b = a.to_host();
  EXPECT_EQ(b.dtype(), DType::kFloat32);
  return std::vector<float>(b.data<float>(), b.data<float>() + b.num_elements());
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(RandomTest, ReferenceBlockMatchesRandom123KnownAnswers) {
  // Random123 kat_vectors, threefry2x32_20 (also JAX's random_test.testThreefry2x32).
  EXPECT_EQ(threefry2x32_block(0, 0, 0, 0), std::make_pair(0x6b200159u, 0x99ba4efeu));
  EXPECT_EQ(threefry2x32_block(~0u, ~0u, ~0u, ~0u), std::make_pair(0x1cb996fcu, 0xbb002be7u));
  EXPECT_EQ(threefry2x32_block(0x13198a2e, 0x03707344, 0x243f6a88, 0x85a308d3),
            std::make_pair(0xc4923a9cu, 0x483df7a0u));
}

TEST(RandomTest, KeyIsJaxThreefrySeed) {
  EXPECT_EQ(u32s(random::key(0)), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(u32s(random::key(42)), (std::vector<uint32_t>{0, 42}));
  EXPECT_EQ(u32s(random::key((uint64_t{7} << 32) | 5)), (std::vector<uint32_t>{7, 5}));
  EXPECT_EQ(random::key(1).dtype(), DType::kUInt32);
  EXPECT_EQ(random::key(1).dims(), (std::vector<int64_t>{2}));
}

TEST(RandomTest, SplitMatchesKnownJaxOutput) {
  // jax.random.key_data(jax.random.split(jax.random.key(0))) with JAX >= 0.5.
  EXPECT_EQ(u32s(random::split(random::key(0))),
            (std::vector<uint32_t>{1797259609u, 2579123966u, 928981903u, 3453687069u}));
}

TEST(RandomTest, SplitIsThreefryOfCountersZeroI) {
  Array k = random::key(123456789);
  Array ks = random::split(k, 5);
  EXPECT_EQ(ks.dims(), (std::vector<int64_t>{5, 2}));
  std::vector<uint32_t> got = u32s(ks);
  for (uint32_t i = 0; i < 5; ++i) {
    auto [a, b] = threefry2x32_block(0, 123456789, 0, i);
    EXPECT_EQ(got[2 * i], a) << i;
    EXPECT_EQ(got[2 * i + 1], b) << i;
  }
  std::vector<Array> list = random::split_keys(k, 5);
  ASSERT_EQ(list.size(), 5u);
  EXPECT_EQ(u32s(list[3]), (std::vector<uint32_t>{got[6], got[7]}));
}

TEST(RandomTest, FoldInIsThreefryOfZeroData) {
  Array k = random::key((uint64_t{3} << 32) | 99);
  for (uint32_t d : {0u, 1u, 0xdeadbeefu}) {
    auto [a, b] = threefry2x32_block(3, 99, 0, d);
    EXPECT_EQ(u32s(random::fold_in(k, d)), (std::vector<uint32_t>{a, b})) << d;
  }
  // An Array scalar (e.g. a step counter) folds in the same way.
  EXPECT_EQ(u32s(random::fold_in(k, array(int32_t{7}))), u32s(random::fold_in(k, 7u)));
}

TEST(RandomTest, RandomBitsXorOfBothWordsOverRowMajorIndex) {
  Array k = random::key(2024);
  Array bits = random::random_bits(k, {3, 7});
  EXPECT_EQ(bits.dims(), (std::vector<int64_t>{3, 7}));
  std::vector<uint32_t> got = u32s(bits);
  for (uint32_t i = 0; i < 21; ++i) {
    auto [a, b] = threefry2x32_block(0, 2024, 0, i);
    EXPECT_EQ(got[i], a ^ b) << i;
  }
}

TEST(RandomTest, UniformF32BitIdenticalToJaxAlgorithm) {
  Array k = random::key(7);
  const int n = 1000;
  std::vector<float> got = f32s(random::uniform(k, {n}));
  std::vector<float> lo_hi = f32s(random::uniform(k, {n}, DType::kFloat32, -1.0, 1.0));
  for (int i = 0; i < n; ++i) {
    auto [a, b] = threefry2x32_block(0, 7, 0, static_cast<uint32_t>(i));
    uint32_t fb = ((a ^ b) >> 9) | 0x3f800000u;  // JAX: mantissa bits under exponent 0, minus 1.0
    float expect;
    std::memcpy(&expect, &fb, 4);
    expect -= 1.0f;
    ASSERT_EQ(bits_of(got[i]), bits_of(expect)) << i;
    float expect2 = std::max(-1.0f, expect * 2.0f + -1.0f);
    ASSERT_EQ(bits_of(lo_hi[i]), bits_of(expect2)) << i;
    ASSERT_GE(got[i], 0.0f);
    ASSERT_LT(got[i], 1.0f);
  }
}

TEST(RandomTest, UniformOtherFloatTypesFollowJaxAlgorithm) {
  Array k = random::key(11);
  const int n = 200;
  std::vector<double> f64 = random::uniform(k, {n}, DType::kFloat64).to_host().to_doubles();
  std::vector<double> f16 = random::uniform(k, {n}, DType::kFloat16).to_host().to_doubles();
  std::vector<double> bf16 = random::uniform(k, {n}, DType::kBFloat16).to_host().to_doubles();
  for (int i = 0; i < n; ++i) {
    auto [a, b] = threefry2x32_block(0, 11, 0, static_cast<uint32_t>(i));
    uint64_t bits64 = (uint64_t{a} << 32) | b;  // 64-bit draws: hi word, lo word (no xor)
    EXPECT_EQ(f64[i], std::ldexp(static_cast<double>(bits64 >> 12), -52)) << i;
    uint32_t x = a ^ b;
    EXPECT_EQ(f16[i], std::ldexp(static_cast<double>((x & 0xffffu) >> 6), -10)) << i;
    EXPECT_EQ(bf16[i], std::ldexp(static_cast<double>((x & 0xffu) >> 1), -7)) << i;
  }
}

TEST(RandomTest, ErfInvInvertsErf) {
  std::vector<float> xs;
  for (double x = -0.999999; x < 1.0; x += 0.013) xs.push_back(static_cast<float>(x));
  xs.push_back(1e-7f);
  Array y = random::erf_inv(array(xs));
  std::vector<float> got = f32s(y);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(std::erf(static_cast<double>(got[i])), xs[i], 2e-7 + 2e-6 * std::fabs(xs[i])) << xs[i];
  }
  std::vector<float> ends = f32s(random::erf_inv(array({-1.0f, 1.0f})));
  EXPECT_EQ(ends[0], -INFINITY);
  EXPECT_EQ(ends[1], INFINITY);
}

TEST(RandomTest, NormalIsSqrt2ErfInvOfUniformAndHasUnitMoments) {
  Array k = random::key(5);
  const int n = 200000;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    std::vector<double> z = random::normal(k, {n}, t).to_host().to_doubles();
    double mean = 0, var = 0, below1 = 0;
    for (double v : z) mean += v;
    mean /= n;
    for (double v : z) var += (v - mean) * (v - mean), below1 += (v < 1.0);
    var /= n;
    // Standard errors: mean 1/sqrt(n) ~ 0.0022, var sqrt(2/n) ~ 0.0032, P(z<1) ~ 0.0008.
    EXPECT_NEAR(mean, 0.0, 0.011) << dtype_name(t);
    EXPECT_NEAR(var, 1.0, 0.016) << dtype_name(t);
    EXPECT_NEAR(below1 / n, 0.841345, 0.004) << dtype_name(t);
  }
  // f32 follows JAX's construction: u = uniform(key, lo = nextafter(-1, 0), hi = 1), z = sqrt(2) erfinv(u).
  std::vector<float> z = f32s(random::normal(k, {1000}));
  std::vector<float> u = f32s(random::uniform(k, {1000}, DType::kFloat32, std::nextafter(-1.0f, 0.0f), 1.0));
  for (int i = 0; i < 1000; ++i) {
    EXPECT_NEAR(std::erf(z[i] / std::sqrt(2.0)), u[i], 1e-6 + 2e-6 * std::fabs(u[i])) << i;
  }
}

TEST(RandomTest, BernoulliFrequency) {
  std::vector<double> b = random::bernoulli(random::key(3), 0.3, {100000}).to_host().to_doubles();
  EXPECT_EQ(random::bernoulli(random::key(3), 0.3, {4}).dtype(), DType::kBool);
  double frac = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
  EXPECT_NEAR(frac, 0.3, 0.006);  // 4 standard errors
  // Exactly uniform < p, elementwise.
  std::vector<float> u = f32s(random::uniform(random::key(3), {1000}));
  std::vector<double> b2 = random::bernoulli(random::key(3), 0.3, {1000}).to_host().to_doubles();
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(b2[i] != 0, u[i] < 0.3f) << i;
}

// JAX's shuffle written out on the threefry reference: per round, split the key, draw 32-bit keys from the
// second half (y0 ^ y1 of the block at counter (0, i)) and stable-sort the current indices by them.
std::vector<int32_t> reference_permutation(uint32_t k0, uint32_t k1, int n) {
  const int rounds = static_cast<int>(std::ceil(3.0 * std::log(static_cast<double>(n)) / std::log(4294967295.0)));
  std::vector<int32_t> x(n);
  std::iota(x.begin(), x.end(), 0);
  for (int r = 0; r < rounds; ++r) {
    const auto carry = threefry2x32_block(k0, k1, 0, 0);
    const auto sub = threefry2x32_block(k0, k1, 0, 1);
    std::vector<uint32_t> bits(n);
    for (int i = 0; i < n; ++i) {
      auto [a, b] = threefry2x32_block(sub.first, sub.second, 0, static_cast<uint32_t>(i));
      bits[i] = a ^ b;
    }
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bits[a] < bits[b]; });
    std::vector<int32_t> next(n);
    for (int i = 0; i < n; ++i) next[i] = x[order[i]];
    x = std::move(next);
    std::tie(k0, k1) = carry;
  }
  return x;
}

TEST(RandomTest, PermutationFollowsJaxShuffle) {
  Array k = random::key(77);
  EXPECT_EQ(random::permutation(k, 300).dtype(), DType::kInt32);
  EXPECT_EQ(random::permutation(k, 300).to_vector<int32_t>(), reference_permutation(0, 77, 300));  // one round
  EXPECT_EQ(random::permutation(k, 2000).to_vector<int32_t>(), reference_permutation(0, 77, 2000));  // two
  std::vector<int32_t> big = random::permutation(k, 100000).to_vector<int32_t>();  // O(n log n), not O(n^2)
  std::vector<int32_t> sorted = big;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(random::permutation(random::key(78), 300).to_vector<int32_t>(), reference_permutation(0, 77, 300));
  EXPECT_EQ(random::permutation(k, 0).dims(), (std::vector<int64_t>{0}));
  EXPECT_EQ(random::permutation(k, 1).to_vector<int32_t>(), (std::vector<int32_t>{0}));
}

// An array's rows along an axis, in the order of permutation(key, n).
TEST(RandomTest, PermutationOfAnArrayShufflesItsRows) {
  Array k = random::key(5);
  std::vector<float> v(4 * 6);
  std::iota(v.begin(), v.end(), 0.0f);
  Array x = array(v, {4, 6});
  const std::vector<int32_t> p4 = random::permutation(k, 4).to_vector<int32_t>();
  const std::vector<int32_t> p6 = random::permutation(k, 6).to_vector<int32_t>();
  const std::vector<float> rows = random::permutation(k, x).to_vector<float>();
  const std::vector<float> cols = random::permutation(k, x, -1).to_vector<float>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(rows[i * 6 + j], v[p4[i] * 6 + j]) << i << "," << j;
      EXPECT_EQ(cols[i * 6 + j], v[i * 6 + p6[j]]) << i << "," << j;
    }
  }
  EXPECT_THROW((void)random::permutation(k, array(1.0f)), InvalidArgument);
  EXPECT_THROW((void)random::permutation(k, x, 2), InvalidArgument);
}

TEST(RandomTest, DeterministicAcrossThreadCounts) {
  Array k = random::key(31337);
  int saved = cpu::num_threads();
  cpu::set_num_threads(1);
  Buffer u1 = random::uniform(k, {1 << 20}).to_host();
  Buffer p1 = random::permutation(k, 500).to_host();
  cpu::set_num_threads(4);
  Buffer u4 = random::uniform(k, {1 << 20}).to_host();
  Buffer p4 = random::permutation(k, 500).to_host();
  cpu::set_num_threads(saved);
  EXPECT_TRUE(u1.bitwise_equal(u4));
  EXPECT_TRUE(p1.bitwise_equal(p4));
  EXPECT_TRUE(u1.bitwise_equal(random::uniform(k, {1 << 20}).to_host()));
}

TEST(RandomTest, TracesUnderJitWithTheSameValues) {
  auto f = jit([](const Array& k, const Array& step) {
    Array kk = random::fold_in(k, step);  // a traced key and a traced step counter
    return std::make_tuple(random::split(kk, 3), random::uniform(kk, {100}), random::normal(kk, {64}),
                           random::permutation(kk, 20), random::bernoulli(kk, 0.5, {10}));
  });
  Array k = random::key(9);
  auto [s, u, z, p, b] = f(k, array(uint32_t{4}));
  Array kk = random::fold_in(k, 4u);
  EXPECT_TRUE(s.to_host().bitwise_equal(random::split(kk, 3).to_host()));
  EXPECT_TRUE(u.to_host().bitwise_equal(random::uniform(kk, {100}).to_host()));
  EXPECT_TRUE(p.to_host().bitwise_equal(random::permutation(kk, 20).to_host()));
  EXPECT_TRUE(b.to_host().bitwise_equal(random::bernoulli(kk, 0.5, {10}).to_host()));
  test::expect_buffers_near(z.to_host(), random::normal(kk, {64}).to_host(), 1e-6, 1e-6);
  // A new step value reuses the compiled program and gives new numbers.
  auto [s5, u5, z5, p5, b5] = f(k, array(uint32_t{5}));
  EXPECT_FALSE(u5.to_host().bitwise_equal(u.to_host()));
  EXPECT_EQ(f.cache_size(), 1);
}

TEST(RandomTest, ErrorsNameTheFunction) {
  EXPECT_THAT([] { random::split(array({1.0f, 2.0f})); },
              testing::ThrowsMessage<InvalidArgument>(testing::HasSubstr("[random.split] expected a key u32[2]")));
  EXPECT_THAT([] { random::uniform(random::key(0), {2}, DType::kInt32); },
              testing::ThrowsMessage<InvalidArgument>(testing::HasSubstr("[random.uniform] expected a floating")));
  EXPECT_THAT([] { random::uniform(random::key(0), {2}, DType::kFloat32, 1.0, 0.0); },
              testing::ThrowsMessage<InvalidArgument>(testing::HasSubstr("minval <= maxval")));
  EXPECT_THAT([] { random::bernoulli(random::key(0), 1.5, {2}); },
              testing::ThrowsMessage<InvalidArgument>(testing::HasSubstr("[random.bernoulli]")));
  EXPECT_THAT([] { random::random_bits(random::key(0), {-1}); },
              testing::ThrowsMessage<InvalidArgument>(testing::HasSubstr("non-negative")));
}

}  // namespace
}  // namespace mcx
