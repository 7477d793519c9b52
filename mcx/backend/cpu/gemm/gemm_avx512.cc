// The GEMM for AVX-512F (compiled with -mavx512f -mfma; called only where the CPU has them): 6 x 64 tiles of C
// in 24 zmm accumulators, the sum blocked by 512.
//
// Blocks measured on a 2-core AVX-512 VM (single thread, against OpenBLAS's own AVX-512 kernels):
// 12 x 32 and 14 x 32 tiles ran 2-4% behind 6 x 64 at the same blocks, and KC = 512 beat 256 by about 5%
// (fewer passes over C); docs/benchmarks.md has the whole-program numbers.
#include <immintrin.h>

#define MCX_GEMM_ISA_NAMESPACE avx512
#include "mcx/backend/cpu/gemm/gemm_blocked.h"

namespace mcx::cpu::gemm {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, Reg r) { _mm512_storeu_ps(p, r); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
};

using Kernel = avx512::Blocked<Avx512, /*MR=*/6, /*NV=*/4, /*KC=*/512, /*MC=*/96, /*NC=*/2048>;

}  // namespace

const GemmIsa& avx512_isa() {
  static constexpr GemmIsa kIsa{"avx512", 6, Kernel::kNR, &Kernel::rectangle};
  return kIsa;
}

}  // namespace mcx::cpu::gemm
