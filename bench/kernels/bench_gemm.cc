// mcx's f32 GEMM (mcx/backend/cpu/gemm/gemm.h) against OpenBLAS's cblas_sgemm, called directly on the same
// operands in the same process, shape by shape: square sizes and the shapes the CPU backend's programs issue
// (the MLP step's forward and backward products, the Winograd convolution's per-point products, the
// convolution weight gradient's). One JSON line per (shape, engine):
//   {"name": "gemm_MxNxK_ta_tb", "engine": ..., "threads": T, "mcx_ms": median, "peer": "openblas",
//    "peer_ms": median, "ratio": peer_ms / mcx_ms, "mcx_gflops": ..., "max_abs_diff": ...}
//
//   bench_gemm [--threads 2] [--reps 20] [--engine avx512|avx2] [--shapes square|programs|all] [--shape MxNxK]...
//
// OpenBLAS runs with the same thread count (openblas_set_num_threads) and, like mcx, reads its kernel set
// from the CPU (or OPENBLAS_CORETYPE). Both see the same warm operands; the minimum of the runs is reported
// beside the median, since shared machines vary. mcx's runs start after OpenBLAS's spinning threads have
// gone to sleep (0.3 s pause), and each side runs 50 ms untimed before its timed runs.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/kernels/timing.h"
#include "mcx/backend/cpu/gemm/gemm.h"
#include "mcx/backend/cpu/thread_pool.h"

namespace {

struct Shape {
  int64_t M, N, K;
  bool ta, tb;
  float beta;
};

using mcx::bench::Timing;

// 50 ms of untimed runs first: the operands warm in cache, the pool's threads awake and settled on their cores,
// as in a training loop's steady state.
Timing time_ms(int reps, const std::function<void()>& fn) {
  return mcx::bench::time_ms(reps, fn, std::chrono::milliseconds(50));
}

std::vector<Shape> square_shapes() {
  return {{128, 128, 128, false, false, 0}, {256, 256, 256, false, false, 0}, {512, 512, 512, false, false, 0},
          {1024, 1024, 1024, false, false, 0}, {1024, 1024, 1024, true, false, 0},
          {1024, 1024, 1024, false, true, 0}};
}

// What bench_core's mlp_step, conv2d and conv2d_grad issue (the CPU backend's calls, traced).
std::vector<Shape> program_shapes() {
  return {{256, 512, 784, false, false, 0}, {256, 512, 512, false, false, 0}, {256, 10, 512, false, false, 0},
          {256, 512, 512, false, true, 0},  {256, 512, 10, false, true, 0},   {784, 512, 256, true, false, 0},
          {512, 512, 256, true, false, 0},  {512, 10, 256, true, false, 0},   {341, 64, 32, false, false, 0},
          {341, 32, 64, false, false, 0},   {288, 64, 784, true, false, 1}};
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : v) x = u(rng);
  return v;
}

void run(const Shape& s, mcx::cpu::GemmEngine engine, int threads, int reps) {
  const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  const std::vector<float> a = random_floats(s.M * s.K, 1), b = random_floats(s.K * s.N, 2);
  const std::vector<float> c0 = random_floats(s.M * s.N, 3);
  std::vector<float> c = c0, r = c0;
  const mcx::cpu::gemm::GemmProblem p{.ta = s.ta, .tb = s.tb, .M = s.M, .N = s.N, .K = s.K, .A = a.data(),
                                      .lda = lda, .B = b.data(), .ldb = ldb, .beta = s.beta, .C = c.data(),
                                      .ldc = s.N};
  // OpenBLAS's idle threads spin for a while after each call (its thread server's timeout): let them go to
  // sleep before mcx's runs, so that neither side runs beside the other's spinning threads.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Timing mine = time_ms(reps, [&] { mcx::cpu::sgemm(engine, p); });
  const Timing peer = time_ms(reps, [&] {
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K,
                1.0f, a.data(), lda, b.data(), ldb, s.beta, r.data(), s.N);
  });
  // With beta != 0 the timed runs accumulated: compare one fresh call of each.
  c = c0, r = c0;
  mcx::cpu::sgemm(engine, p);
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
              a.data(), lda, b.data(), ldb, s.beta, r.data(), s.N);
  double diff = 0;
  for (size_t i = 0; i < c.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(c[i] - r[i])));
  const double gflop = 2.0 * static_cast<double>(s.M * s.N * s.K) / 1e9;
  std::printf("{\"name\": \"gemm_%ldx%ldx%ld%s%s%s\", \"engine\": \"%s\", \"threads\": %d, \"mcx_ms\": %.4f, "
              "\"peer\": \"openblas\", \"peer_ms\": %.4f, \"ratio\": %.3f, \"mcx_min_ms\": %.4f, \"peer_min_ms\": "
              "%.4f, \"ratio_min\": %.3f, \"mcx_gflops\": %.1f, \"peer_gflops\": %.1f, \"max_abs_diff\": %.3g}\n",
              static_cast<long>(s.M), static_cast<long>(s.N), static_cast<long>(s.K), s.ta ? "_ta" : "",
              s.tb ? "_tb" : "", s.beta != 0 ? "_beta1" : "", std::string(mcx::cpu::gemm_engine_name(engine)).c_str(),
              threads, mine.median, peer.median, peer.median / mine.median, mine.min, peer.min, peer.min / mine.min,
              gflop / (mine.median / 1e3), gflop / (peer.median / 1e3), diff);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 20;
  std::string shapes = "all";
  std::vector<Shape> custom;  // --shape MxNxK (repeatable): these alone
  mcx::cpu::GemmEngine engine = mcx::cpu::gemm_engine();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--threads" && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--reps" && has_value) {
      reps = std::atoi(argv[++i]);
    } else if (arg == "--shape" && has_value) {
      Shape one{0, 0, 0, false, false, 0};
      if (std::sscanf(argv[++i], "%ldx%ldx%ld", &one.M, &one.N, &one.K) != 3 || one.M < 1 || one.N < 1 || one.K < 1) {
        std::fprintf(stderr, "bench_gemm: --shape takes MxNxK, got '%s'\n", argv[i]);
        return 2;
      }
      custom.push_back(one);
    } else if (arg == "--shapes" && has_value) {
      shapes = argv[++i];
    } else if (arg == "--engine" && has_value) {
      const std::string e = argv[++i];
      if (e != "avx512" && e != "avx2") {
        std::fprintf(stderr, "bench_gemm: --engine takes avx512 or avx2, got '%s'\n", e.c_str());
        return 2;
      }
      engine = e == "avx512" ? mcx::cpu::GemmEngine::kAvx512 : mcx::cpu::GemmEngine::kAvx2;
    } else {
      std::fprintf(stderr, "usage: bench_gemm [--threads N] [--reps N] [--engine avx512|avx2] "
                           "[--shapes square|programs|all] [--shape MxNxK]...\n");
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || (shapes != "square" && shapes != "programs" && shapes != "all")) {
    std::fprintf(stderr, "bench_gemm: --threads and --reps take positive counts, --shapes square|programs|all\n");
    return 2;
  }
  if (engine == mcx::cpu::GemmEngine::kOpenBlas || !mcx::cpu::gemm_engine_supported(engine)) {
    std::fprintf(stderr, "bench_gemm: this CPU has none of mcx's GEMM kernels (AVX2 with FMA at least)\n");
    return 1;
  }
  mcx::cpu::set_num_threads(threads);
  openblas_set_num_threads(threads);
  std::vector<Shape> list = custom;
  if (custom.empty() && shapes != "programs") list = square_shapes();
  if (custom.empty() && shapes != "square") {
    for (const Shape& s : program_shapes()) list.push_back(s);
  }
  for (const Shape& s : list) run(s, engine, threads, reps);
  return 0;
}
