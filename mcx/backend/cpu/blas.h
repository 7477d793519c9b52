// The GEMM entry point of the CPU kernels: row-major C[M, N] = op(A) op(B) + beta * C. f32 runs on the engine
// gemm_engine() names (mcx's own kernels by default, gemm/gemm.h), f64 through OpenBLAS's cblas (which
// threads itself; thread_pool.h says how many threads it uses). Internal to the CPU backend.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

#include "mcx/backend/cpu/gemm/gemm.h"

namespace mcx::cpu {

// op(A) is A[M, K] (lda >= K) or, with ta, the transpose of A[K, M] (lda >= M); likewise op(B) is [K, N].
// C has leading dimension ldc >= N; beta == 0 overwrites C without reading it.
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
               T beta, T* C, int64_t ldc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cblas takes float or double");
  if constexpr (std::is_same_v<T, float>) {
    sgemm(gemm_engine(), {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .A = A, .lda = lda, .B = B, .ldb = ldb,
                          .beta = beta, .C = C, .ldc = ldc});
  } else {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0, A, lda,
                B, ldb, beta, C, ldc);
  }
}

}  // namespace mcx::cpu
