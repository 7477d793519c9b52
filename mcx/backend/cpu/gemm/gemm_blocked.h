// The blocked GEMM shared by the instruction-set files (gemm_avx512.cc, gemm_avx2.cc): packing of op(B) into
// panels and a register-blocked micro-kernel, written once over a vector type V and compiled once per
// instruction set. Include only from those files, after defining MCX_GEMM_ISA_NAMESPACE (each gets its own
// namespace, so the copies compiled for different vector widths never merge at link time).
//
// The loops (Goto's algorithm, as in BLIS and OpenBLAS, less the packing of A): for each block of NC
// columns, for each block of KC of the sum, op(B)'s block is packed into NR-wide panels (zero-padded); for
// each block of MC rows (kept in L2 while every panel of B passes), the micro-kernel computes each MR x NR
// tile of C in registers over KC steps: one broadcast of A times NR/width vectors of B per row and step.
// A[M, K] is read in place: a tile's MR rows are MR sequential streams, which the hardware prefetches;
// packing them measured slower on every shape of bench_gemm (the copy costs a pass over A per column block,
// while the in-place rows already sit in L1 and L2). A transposed op(A) is packed (a cheap copy of MR
// contiguous floats per step) where the rectangle is wider than two panels, since in place its steps sit
// lda apart.
//
// V provides: Reg, kWidth (floats per Reg), zero(), loadu(p), storeu(p, r), set1(x), fmadd(a, b, c) = a*b+c,
// add(a, b).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "mcx/backend/cpu/gemm/gemm_isa.h"

#ifndef MCX_GEMM_ISA_NAMESPACE
#error "define MCX_GEMM_ISA_NAMESPACE before including gemm_blocked.h"
#endif

namespace mcx::cpu::gemm::MCX_GEMM_ISA_NAMESPACE {

// A thread's packing buffer: 64-byte aligned, grown on demand, freed with the thread.
class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  ~PackBuffer() { std::free(data_); }
  float* get(int64_t floats) {
    if (floats > capacity_) {
      std::free(data_);
      capacity_ = 0;
      const int64_t bytes = (floats * static_cast<int64_t>(sizeof(float)) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(bytes)));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = floats;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

// MR x (NV * V::kWidth) tiles of C; KC, MC, NC the cache blocks (MC a multiple of MR, NC of NR).
template <class V, int MR, int NV, int KC, int MC, int NC>
struct Blocked {
  static constexpr int kW = V::kWidth;
  static constexpr int kNR = NV * kW;
  static_assert(MC % MR == 0 && NC % kNR == 0, "cache blocks are whole tiles");
  using Reg = typename V::Reg;

  // One tile: C[0:m, 0:n] = beta * C + sum over kc steps of a (x) b, m <= MR, n <= NVU * kW; only
  // C[0:m, 0:n] is touched. b holds kc steps of NR values (packed, zeros past n; the first NVU vectors of
  // each step are read). Row i's step k of op(A) is at a + row_offset[i] + k * k_stride: in place (rows past
  // m repeat row m - 1, so nothing outside A is read) or a packed panel (offsets 0..MR-1, stride MR).
  template <int NVU>
  static void micro_kernel(int64_t kc, const float* __restrict a, const int64_t* row_offset, int64_t k_stride,
                           const float* __restrict b, float* __restrict c, int64_t ldc, float beta, int m, int n) {
    Reg acc[MR][NVU];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int v = 0; v < NVU; ++v) acc[i][v] = V::zero();
    }
    int64_t offset[MR];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) offset[i] = row_offset[i];
    for (int64_t k = 0; k < kc; ++k) {
      Reg bv[NVU];
#pragma GCC unroll 8
      for (int v = 0; v < NVU; ++v) bv[v] = V::loadu(b + v * kW);
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i) {
        const Reg ai = V::set1(a[offset[i]]);
#pragma GCC unroll 8
        for (int v = 0; v < NVU; ++v) acc[i][v] = V::fmadd(ai, bv[v], acc[i][v]);
      }
      a += k_stride;
      b += kNR;
    }
    if (m == MR && n == NVU * kW) {
      const Reg vb = V::set1(beta);
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
        for (int v = 0; v < NVU; ++v) {
          float* p = c + i * ldc + v * kW;
          if (beta == 0.0f) {
            V::storeu(p, acc[i][v]);
          } else if (beta == 1.0f) {
            V::storeu(p, V::add(V::loadu(p), acc[i][v]));
          } else {
            V::storeu(p, V::fmadd(vb, V::loadu(p), acc[i][v]));
          }
        }
      }
      return;
    }
    constexpr int kTileWidth = NVU * kW;
    alignas(64) float tile[MR * kTileWidth];
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int v = 0; v < NVU; ++v) V::storeu(tile + i * kTileWidth + v * kW, acc[i][v]);
    }
    for (int i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      const float* t = tile + i * kTileWidth;
      if (beta == 0.0f) {
        for (int j = 0; j < n; ++j) row[j] = t[j];
      } else {
        for (int j = 0; j < n; ++j) row[j] = beta * row[j] + t[j];
      }
    }
  }

  // The micro-kernel for a tile n columns wide: as many vectors of B as the columns need.
  static void tile(int64_t kc, const float* a, const int64_t* row_offset, int64_t k_stride, const float* b, float* c,
                   int64_t ldc, float beta, int m, int n) {
    const int vectors = (n + kW - 1) / kW;
    if (vectors >= NV) return micro_kernel<NV>(kc, a, row_offset, k_stride, b, c, ldc, beta, m, n);
    if constexpr (NV > 1) {
      if (vectors == 1) return micro_kernel<1>(kc, a, row_offset, k_stride, b, c, ldc, beta, m, n);
    }
    if constexpr (NV > 2) {
      if (vectors == 2) return micro_kernel<2>(kc, a, row_offset, k_stride, b, c, ldc, beta, m, n);
    }
    if constexpr (NV > 3) {
      if (vectors == 3) return micro_kernel<3>(kc, a, row_offset, k_stride, b, c, ldc, beta, m, n);
    }
    static_assert(NV <= 4, "tiles of at most 4 vectors of B");
  }

  // op(B)[pc:pc+kc, jc:jc+nc] into NR-wide panels: panel q holds, for each k, columns q*NR .. q*NR+NR-1
  // (zeros past nc).
  static void pack_b(const GemmProblem& p, int64_t pc, int64_t kc, int64_t jc, int64_t nc, float* __restrict out) {
    for (int64_t c0 = 0; c0 < nc; c0 += kNR) {
      const int cols = static_cast<int>(std::min<int64_t>(kNR, nc - c0));
      float* __restrict panel = out + c0 * kc;
      if (!p.tb) {  // B is [K, N]: each step's NR values are contiguous
        const float* src = p.B + pc * p.ldb + jc + c0;
        for (int64_t k = 0; k < kc; ++k, src += p.ldb) {
          if (cols == kNR) {
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) V::storeu(panel + k * kNR + v * kW, V::loadu(src + v * kW));
          } else {
            for (int j = 0; j < cols; ++j) panel[k * kNR + j] = src[j];
            for (int j = cols; j < kNR; ++j) panel[k * kNR + j] = 0.0f;
          }
        }
      } else {  // B is [N, K]: read each column of op(B) along k
        for (int j = 0; j < cols; ++j) {
          const float* src = p.B + (jc + c0 + j) * p.ldb + pc;
          for (int64_t k = 0; k < kc; ++k) panel[k * kNR + j] = src[k];
        }
        for (int j = cols; j < kNR; ++j) {
          for (int64_t k = 0; k < kc; ++k) panel[k * kNR + j] = 0.0f;
        }
      }
    }
  }

  static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

  // A transposed op(A) ([K, M] in memory) into MR-tall panels: panel r holds, for each of the kc steps, the
  // MR values of rows r*MR .. (zeros past mc). In place, a tile's steps would sit lda apart, one cache line
  // each, and with lda a multiple of 1,024 floats every step maps to the same L1 sets.
  static void pack_a_transposed(const GemmProblem& p, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
                                float* __restrict out) {
    for (int64_t r0 = 0; r0 < mc; r0 += MR) {
      const int rows = static_cast<int>(std::min<int64_t>(MR, mc - r0));
      float* __restrict panel = out + r0 * kc;
      const float* src = p.A + pc * p.lda + ic + r0;
      for (int64_t k = 0; k < kc; ++k, src += p.lda) {
        if (rows == MR) {
#pragma GCC unroll 32
          for (int i = 0; i < MR; ++i) panel[k * MR + i] = src[i];
        } else {
          for (int i = 0; i < MR; ++i) panel[k * MR + i] = i < rows ? src[i] : 0.0f;
        }
      }
    }
  }

  static void rectangle(const GemmProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    thread_local PackBuffer a_buffer, b_buffer;
    const int64_t kc_max = std::min<int64_t>(KC, p.K);
    float* b_packed = b_buffer.get(round_up(std::min<int64_t>(NC, n1 - n0), kNR) * kc_max);
    // Packing pays where a panel serves several panels of B; a rectangle this narrow reads A in place.
    const bool pack_a = p.ta && n1 - n0 > 2 * kNR;
    float* a_packed = pack_a ? a_buffer.get(round_up(std::min<int64_t>(MC, m1 - m0), MR) * kc_max) : nullptr;
    const int64_t row_stride = p.ta ? 1 : p.lda, k_stride = p.ta ? p.lda : 1;
    int64_t packed_offset[MR];
    for (int i = 0; i < MR; ++i) packed_offset[i] = i;
    for (int64_t jc = n0; jc < n1; jc += NC) {
      const int64_t nc = std::min<int64_t>(NC, n1 - jc);
      for (int64_t pc = 0; pc < p.K; pc += KC) {
        const int64_t kc = std::min<int64_t>(KC, p.K - pc);
        pack_b(p, pc, kc, jc, nc, b_packed);
        const float beta = pc == 0 ? p.beta : 1.0f;  // later blocks of the sum accumulate
        for (int64_t ic = m0; ic < m1; ic += MC) {
          const int64_t mc = std::min<int64_t>(MC, m1 - ic);
          if (pack_a) pack_a_transposed(p, ic, mc, pc, kc, a_packed);
          for (int64_t jr = 0; jr < nc; jr += kNR) {
            const int n = static_cast<int>(std::min<int64_t>(kNR, nc - jr));
            for (int64_t ir = 0; ir < mc; ir += MR) {
              const int m = static_cast<int>(std::min<int64_t>(MR, mc - ir));
              float* c = p.C + (ic + ir) * p.ldc + jc + jr;
              if (pack_a) {
                tile(kc, a_packed + ir * kc, packed_offset, MR, b_packed + jr * kc, c, p.ldc, beta, m, n);
                continue;
              }
              int64_t row_offset[MR];  // op(A) in place
              for (int i = 0; i < MR; ++i) row_offset[i] = std::min(i, m - 1) * row_stride;
              const float* a = p.A + (ic + ir) * row_stride + pc * k_stride;
              tile(kc, a, row_offset, k_stride, b_packed + jr * kc, c, p.ldc, beta, m, n);
            }
          }
        }
      }
    }
  }
};

}  // namespace mcx::cpu::gemm::MCX_GEMM_ISA_NAMESPACE
