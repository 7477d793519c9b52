// The GEMM for AVX2 (compiled with -mavx2 -mfma; called only where the CPU has them): 6 x 16 tiles of C in 12
// ymm accumulators (of 16 registers), the sum blocked by 512 (with 256 and A transposed in place, 1024^3 ran
// at 0.63-0.82x OpenBLAS's Haswell kernels; with 512 and the transposed A packed, 0.81-1.0x over four runs).
#include <immintrin.h>

#define MCX_GEMM_ISA_NAMESPACE avx2
#include "mcx/backend/cpu/gemm/gemm_blocked.h"

namespace mcx::cpu::gemm {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, Reg r) { _mm256_storeu_ps(p, r); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
};

using Kernel = avx2::Blocked<Avx2, /*MR=*/6, /*NV=*/2, /*KC=*/512, /*MC=*/96, /*NC=*/2048>;

}  // namespace

const GemmIsa& avx2_isa() {
  static constexpr GemmIsa kIsa{"avx2", 6, Kernel::kNR, &Kernel::rectangle};
  return kIsa;
}

}  // namespace mcx::cpu::gemm
