// mcx's f32 GEMM driver: picks the instruction set, splits C into rectangles across threads and falls back to
// OpenBLAS where asked.
#include "mcx/backend/cpu/gemm/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/config.h"
#include "mcx/core/logging.h"

namespace mcx::cpu {
namespace {

// Below this many multiply-adds a thread, handing work to another thread costs more than it saves (a hand-off
// to a pool worker that is awake takes a few microseconds; 2^19 multiply-adds take about 10 us at 100 GFLOPS).
constexpr int64_t kMinMultiplyAddsPerThread = int64_t{1} << 19;

#if defined(__x86_64__)
const gemm::GemmIsa& isa_of(GemmEngine engine) {
  return engine == GemmEngine::kAvx512 ? gemm::avx512_isa() : gemm::avx2_isa();
}
#else  // no instruction-set files are built here (mcx/CMakeLists.txt); sgemm checked the engine is supported
const gemm::GemmIsa& isa_of(GemmEngine) { std::abort(); }
#endif

GemmEngine best_supported() {
  if (gemm_engine_supported(GemmEngine::kAvx512)) return GemmEngine::kAvx512;
  if (gemm_engine_supported(GemmEngine::kAvx2)) return GemmEngine::kAvx2;
  return GemmEngine::kOpenBlas;
}

GemmEngine resolve_engine() {
  absl::StatusOr<std::string> asked = kCpuGemmFlag.get();
  if (!asked.ok()) {
    log_warn("[cpu] {}; using MCX_CPU_GEMM=auto", std::string(asked.status().message()));
    return best_supported();
  }
  if (*asked == "openblas") return GemmEngine::kOpenBlas;
  if (*asked == "auto") return best_supported();
  const GemmEngine engine = *asked == "avx512" ? GemmEngine::kAvx512 : GemmEngine::kAvx2;
  if (gemm_engine_supported(engine)) return engine;
  const GemmEngine fallback = best_supported();
  log_warn("[cpu] MCX_CPU_GEMM={}: this CPU lacks it; using {}", *asked, std::string(gemm_engine_name(fallback)));
  return fallback;
}

// The rectangles of C the threads compute: rows in mt bands and columns in nt bands, each band a whole
// number of micro-tiles.
struct Split {
  int64_t mt = 1, nt = 1;
};

// Every rectangle packs its own copy of the op(A) rows and op(B) columns it needs, so splitting the rows
// in mt bands packs op(B) mt times and splitting the columns packs op(A) nt times: of the splits into
// `threads` rectangles with at least one tile each, the one that packs least.
Split choose_split(const gemm::GemmProblem& p, const gemm::GemmIsa& isa, int threads) {
  const int64_t row_tiles = (p.M + isa.mr - 1) / isa.mr, col_tiles = (p.N + isa.nr - 1) / isa.nr;
  for (int t = threads; t > 1; --t) {
    Split best;
    int64_t best_cost = std::numeric_limits<int64_t>::max();
    for (int64_t mt = 1; mt <= t; ++mt) {
      if (t % mt != 0) continue;
      const int64_t nt = t / mt;
      if (mt > row_tiles || nt > col_tiles) continue;
      const int64_t cost = mt * p.K * p.N + nt * p.M * p.K;
      if (cost < best_cost) best_cost = cost, best = {mt, nt};
    }
    if (best_cost != std::numeric_limits<int64_t>::max()) return best;
  }
  return {};
}

// Band `i` of `bands` over `extent` elements in whole tiles of `tile`: [*begin, *end).
void band(int64_t extent, int64_t tile, int64_t bands, int64_t i, int64_t* begin, int64_t* end) {
  const int64_t tiles = (extent + tile - 1) / tile;
  *begin = std::min(extent, tiles * i / bands * tile);
  *end = std::min(extent, tiles * (i + 1) / bands * tile);
}

void scale(const gemm::GemmProblem& p) {
  for (int64_t i = 0; i < p.M; ++i) {
    float* row = p.C + i * p.ldc;
    if (p.beta == 0.0f) {
      std::fill(row, row + p.N, 0.0f);
    } else {
      for (int64_t j = 0; j < p.N; ++j) row[j] *= p.beta;
    }
  }
}

}  // namespace

bool gemm_engine_supported(GemmEngine engine) {
  switch (engine) {
    case GemmEngine::kOpenBlas:
      return true;
#if defined(__x86_64__)
    case GemmEngine::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmEngine::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#else
    case GemmEngine::kAvx2:
    case GemmEngine::kAvx512:
      return false;
#endif
  }
  return false;
}

GemmEngine gemm_engine() {
  static const GemmEngine engine = resolve_engine();
  return engine;
}

std::string_view gemm_engine_name(GemmEngine engine) {
  switch (engine) {
    case GemmEngine::kOpenBlas:
      return "openblas";
    case GemmEngine::kAvx2:
      return "avx2";
    case GemmEngine::kAvx512:
      return "avx512";
  }
  return "unknown";
}

void sgemm(GemmEngine engine, const gemm::GemmProblem& p) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.K <= 0) return scale(p);
  if (engine == GemmEngine::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M, p.N, p.K,
                1.0f, p.A, p.lda, p.B, p.ldb, p.beta, p.C, p.ldc);
    return;
  }
  if (!gemm_engine_supported(engine)) {
    throw std::invalid_argument("[cpu] sgemm: this CPU cannot run the " + std::string(gemm_engine_name(engine)) +
                                " kernels (gemm_engine_supported is false)");
  }
  const gemm::GemmIsa& isa = isa_of(engine);
  const int64_t work = p.M * p.N * p.K;
  const int threads = static_cast<int>(
      std::clamp<int64_t>(work / kMinMultiplyAddsPerThread, 1, std::max(1, intra_op_threads())));
  const Split split = choose_split(p, isa, threads);
  if (split.mt * split.nt == 1) {
    isa.rectangle(p, 0, p.M, 0, p.N);
    return;
  }
  parallel_for(split.mt * split.nt, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t m0, m1, n0, n1;
      band(p.M, isa.mr, split.mt, r / split.nt, &m0, &m1);
      band(p.N, isa.nr, split.nt, r % split.nt, &n0, &n1);
      if (m0 < m1 && n0 < n1) isa.rectangle(p, m0, m1, n0, n1);
    }
  });
}

}  // namespace mcx::cpu
