// The contract between mcx's f32 GEMM driver (gemm.h) and its instruction-set-specific halves
// (gemm_avx512.cc, gemm_avx2.cc, each compiled for its vector width). Internal to the CPU backend.
//
// A GemmIsa computes one rectangle of C sequentially on the calling thread: packing panels of op(B) (and of a
// transposed op(A)) into thread-local buffers and running its register-blocked micro-kernel over them. The driver splits C
// into rectangles across threads and calls an ISA's functions only where the CPU has that ISA.
#pragma once

#include <cstdint>

namespace mcx::cpu::gemm {

// Row-major C[M, N] = op(A)[M, K] op(B)[K, N] + beta * C. op(A) is A[M, K] with row stride lda, or with ta
// the transpose of A[K, M] (row stride lda); likewise op(B). beta == 0 writes C without reading it (NaNs in
// C do not propagate).
struct GemmProblem {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  const float* A = nullptr;
  int64_t lda = 0;
  const float* B = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int64_t ldc = 0;
};

// Computes rows [m0, m1) and columns [n0, n1) of C (0 <= m0 < m1 <= M, 0 <= n0 < n1 <= N, K >= 1). Safe to
// call concurrently for disjoint rectangles of one problem; allocates only its thread-local packing buffers
// (grown on first use, kept for the thread's life).
using GemmRectangleFn = void (*)(const GemmProblem& problem, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

struct GemmIsa {
  const char* name;  // "avx512", "avx2"
  int mr, nr;        // the micro-kernel's tile of C: rectangles are best split at multiples of these
  GemmRectangleFn rectangle;
};

// Defined in the files compiled for each instruction set; calling their rectangle function on a CPU without
// the ISA is undefined (the driver checks the CPU's features first).
const GemmIsa& avx512_isa();  // AVX-512F with FMA
const GemmIsa& avx2_isa();    // AVX2 with FMA

}  // namespace mcx::cpu::gemm
