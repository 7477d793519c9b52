// mcx's f32 GEMM (mcx/backend/cpu/gemm/gemm.h) against a double-precision reference, on every instruction set
// this CPU runs: edges of every block (tiles, cache blocks, the narrow-panel path), all four transposes, beta
// 0 / 1 / other, padded strides, threads, and OpenBLAS on the same operands.
#include "mcx/backend/cpu/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/config.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  float beta;
  int64_t pad = 0;  // extra elements in every leading dimension
};

std::string describe(const Case& c) {
  return std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + (c.ta ? " ta" : "") +
         (c.tb ? " tb" : "") + " beta=" + std::to_string(c.beta) + " pad=" + std::to_string(c.pad);
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : v) x = u(rng);
  return v;
}

// Runs one case on `engine` and checks every element of C against the double-precision sum, within the
// error bound of a float dot product (K roundings, relative to the sum of |terms|), and that the padding
// between rows of C is untouched.
void check(GemmEngine engine, const Case& c) {
  SCOPED_TRACE(std::string(gemm_engine_name(engine)) + " " + describe(c));
  const int64_t lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
  const std::vector<float> a = random_floats((c.ta ? c.K : c.M) * lda, 1);
  const std::vector<float> b = random_floats((c.tb ? c.N : c.K) * ldb, 2);
  std::vector<float> out = random_floats(c.M * ldc, 3);
  if (c.beta == 0.0f) {  // beta == 0 must not read C: NaNs there must not reach the result
    for (int64_t i = 0; i < c.M; ++i) out[i * ldc] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::vector<float> before = out;
  sgemm(engine, {.ta = c.ta, .tb = c.tb, .M = c.M, .N = c.N, .K = c.K, .A = a.data(), .lda = lda, .B = b.data(),
                 .ldb = ldb, .beta = c.beta, .C = out.data(), .ldc = ldc});
  int bad = 0;
  for (int64_t i = 0; i < c.M && bad < 5; ++i) {
    for (int64_t j = 0; j < ldc && bad < 5; ++j) {
      const float got = out[i * ldc + j];
      if (j >= c.N) {
        if (std::memcmp(&got, &before[i * ldc + j], sizeof got) != 0) {
          ADD_FAILURE() << "padding C[" << i << ", " << j << "] was written";
          ++bad;
        }
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double x = c.ta ? a[k * lda + i] : a[i * lda + k], y = c.tb ? b[j * ldb + k] : b[k * ldb + j];
        sum += x * y;
        magnitude += std::fabs(x * y);
      }
      if (c.beta != 0.0f) {
        sum += static_cast<double>(c.beta) * before[i * ldc + j];
        magnitude += std::fabs(static_cast<double>(c.beta) * before[i * ldc + j]);
      }
      const double bound = (c.K + 2) * std::numeric_limits<float>::epsilon() * magnitude + 1e-30;
      if (!(std::fabs(got - sum) <= bound)) {
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", expected " << sum << " within " << bound;
        ++bad;
      }
    }
  }
}

// mcx's kernels this CPU runs.
std::vector<GemmEngine> own_engines() {
  std::vector<GemmEngine> out;
  for (GemmEngine e : {GemmEngine::kAvx512, GemmEngine::kAvx2}) {
    if (gemm_engine_supported(e)) out.push_back(e);
  }
  return out;
}

// The engines the reference checks cover: mcx's kernels this CPU runs, or, on a CPU with none of them, OpenBLAS,
// which f32 products use there.
std::vector<GemmEngine> engines() {
  std::vector<GemmEngine> out = own_engines();
  if (out.empty()) out.push_back(GemmEngine::kOpenBlas);
  return out;
}

// Sizes at every edge of the blocks: 1, the tile sides (6, 16, 64) and one either side, the cache blocks
// (96 rows, 256 and 512 steps of the sum, 2,048 columns) and past them.
TEST(Gemm, EveryEdgeEveryTransposeAgainstDoublePrecision) {
  const std::vector<GemmEngine> list = engines();
  ThreadCountGuard guard;
  set_num_threads(1);
  const std::vector<int64_t> ms = {1, 5, 6, 7, 97, 193}, ns = {1, 15, 16, 17, 63, 64, 65, 130}, ks = {1, 7, 257, 513};
  for (GemmEngine e : list) {
    for (int64_t m : ms) {
      for (int64_t n : ns) {
        for (int64_t k : ks) {
          const bool ta = (m + n) % 2 == 1, tb = (n + k) % 2 == 0;  // every combination occurs
          check(e, {m, n, k, ta, tb, 0.0f});
        }
      }
    }
  }
}

TEST(Gemm, TransposesBetasAndPaddedStrides) {
  const std::vector<GemmEngine> list = engines();
  ThreadCountGuard guard;
  set_num_threads(1);
  for (GemmEngine e : list) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          check(e, {37, 150, 600, ta, tb, beta});
          check(e, {37, 150, 600, ta, tb, beta, /*pad=*/3});
        }
      }
    }
  }
}

TEST(Gemm, LargeProblemsSplitAcrossThreads) {
  const std::vector<GemmEngine> list = engines();
  ThreadCountGuard guard;
  for (int threads : {2, 3, 4}) {
    set_num_threads(threads);
    for (GemmEngine e : list) {
      check(e, {300, 2100, 40, false, false, 0.0f});  // columns past one cache block, split in columns
      check(e, {700, 70, 300, true, false, 1.0f});    // split in rows
      check(e, {7, 9, 5000, false, true, 0.0f});      // too little work to split: one thread
    }
  }
  // Inside a pool chunk (the convolutions call GEMMs so) and under a reduced budget: runs on the caller.
  set_num_threads(2);
  for (GemmEngine e : list) {
    parallel_for(2, 1, [&](int64_t, int64_t) { check(e, {200, 200, 200, false, false, 0.0f}); });
    ScopedIntraOpThreads one(1);
    check(e, {200, 200, 200, true, true, 0.0f});
  }
}

TEST(Gemm, AgreesWithOpenBlas) {
  const std::vector<GemmEngine> list = own_engines();
  if (list.empty()) {  // nothing of mcx's to compare: f32 products must then run on OpenBLAS
    EXPECT_EQ(gemm_engine(), GemmEngine::kOpenBlas);
    return;
  }
  const int64_t M = 129, N = 257, K = 700;
  const std::vector<float> a = random_floats(M * K, 4), b = random_floats(K * N, 5);
  std::vector<float> reference(M * N);
  sgemm(GemmEngine::kOpenBlas, {.M = M, .N = N, .K = K, .A = a.data(), .lda = K, .B = b.data(), .ldb = N,
                                .C = reference.data(), .ldc = N});
  for (GemmEngine e : list) {
    std::vector<float> out(M * N);
    sgemm(e, {.M = M, .N = N, .K = K, .A = a.data(), .lda = K, .B = b.data(), .ldb = N, .C = out.data(), .ldc = N});
    double worst = 0;
    for (int64_t i = 0; i < M * N; ++i) worst = std::max(worst, static_cast<double>(std::fabs(out[i] - reference[i])));
    EXPECT_LT(worst, 1e-3) << gemm_engine_name(e);  // |sum| ~ sqrt(K) / 3; float rounding ~ 1e-5 of that
  }
}

TEST(Gemm, EmptySumScalesC) {
  for (GemmEngine e : {GemmEngine::kOpenBlas, GemmEngine::kAvx2, GemmEngine::kAvx512}) {
    if (!gemm_engine_supported(e)) continue;
    std::vector<float> c = {1, 2, 3, 4, 5, 6};
    sgemm(e, {.M = 2, .N = 3, .K = 0, .beta = 0.5f, .C = c.data(), .ldc = 3});
    EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3})) << gemm_engine_name(e);
    c[0] = std::numeric_limits<float>::quiet_NaN();
    sgemm(e, {.M = 2, .N = 3, .K = 0, .beta = 0.0f, .C = c.data(), .ldc = 3});
    EXPECT_EQ(c, std::vector<float>(6, 0.0f)) << gemm_engine_name(e);
    sgemm(e, {.M = 0, .N = 3, .K = 4, .C = nullptr, .ldc = 3});  // nothing to compute, nothing touched
  }
}

TEST(Gemm, EngineIsNamedAndSupported) {
  const GemmEngine e = gemm_engine();
  EXPECT_TRUE(gemm_engine_supported(e));
  EXPECT_TRUE(gemm_engine_supported(GemmEngine::kOpenBlas));
  if (gemm_engine_supported(GemmEngine::kAvx512) && kCpuGemmFlag.get().value_or("") == "auto") {
    EXPECT_EQ(e, GemmEngine::kAvx512);  // auto takes the widest
  }
  EXPECT_EQ(gemm_engine_name(GemmEngine::kAvx2), "avx2");
}

}  // namespace
}  // namespace mcx::cpu::testing
