// Winograd F(2x2, 3x3); see conv_winograd.h. Built at -O3 (the *_fastmath.cc rule) so that the
// transforms vectorise over channels; they only add, subtract and halve.
#include "mcx/backend/cpu/conv_winograd.h"

#include <algorithm>

#include "mcx/backend/cpu/blas.h"
#include "mcx/backend/cpu/multiversion.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/buffer.h"

namespace mcx::cpu {
namespace {

// Elements of the per-worker transformed tiles (V and M) of one block of tiles: 2 MiB of float.
constexpr int64_t kBlockElements = int64_t{1} << 19;

// The transforms, on n channels at once: tile element e (row-major 4x4) of d is the run d + e * ds, and
// likewise for v and m. Inlined into the multiversioned float and double entry points below.

// v = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], per channel: the rows of d into r (16
// runs of n), then the columns of r into v. Two passes of four-stream loops, which vectorise.
template <typename T>
inline __attribute__((always_inline)) void input_transform_t(const T* __restrict__ d, int64_t ds, T* __restrict__ r,
                                                             T* __restrict__ v, int64_t vs, int64_t n) {
  for (int j = 0; j < 4; ++j) {
    const T* __restrict__ d0 = d + j * ds;
    const T* __restrict__ d1 = d + (4 + j) * ds;
    const T* __restrict__ d2 = d + (8 + j) * ds;
    const T* __restrict__ d3 = d + (12 + j) * ds;
    T* __restrict__ r0 = r + j * n;
    T* __restrict__ r1 = r + (4 + j) * n;
    T* __restrict__ r2 = r + (8 + j) * n;
    T* __restrict__ r3 = r + (12 + j) * n;
    for (int64_t c = 0; c < n; ++c) {
      r0[c] = d0[c] - d2[c];
      r1[c] = d1[c] + d2[c];
      r2[c] = d2[c] - d1[c];
      r3[c] = d1[c] - d3[c];
    }
  }
  for (int i = 0; i < 4; ++i) {
    const T* __restrict__ r0 = r + 4 * i * n;
    const T* __restrict__ r1 = r0 + n;
    const T* __restrict__ r2 = r1 + n;
    const T* __restrict__ r3 = r2 + n;
    T* __restrict__ v0 = v + 4 * i * vs;
    T* __restrict__ v1 = v0 + vs;
    T* __restrict__ v2 = v1 + vs;
    T* __restrict__ v3 = v2 + vs;
    for (int64_t c = 0; c < n; ++c) {
      v0[c] = r0[c] - r2[c];
      v1[c] = r1[c] + r2[c];
      v2[c] = r2[c] - r1[c];
      v3[c] = r1[c] - r3[c];
    }
  }
}

// The 2x2 outputs A^T m A with A^T = [1 1 1 0; 0 1 -1 -1], per channel, into y[0..3] (row-major 2x2).
template <typename T>
inline __attribute__((always_inline)) void output_transform_t(const T* __restrict__ m, int64_t ms,
                                                              T* const* __restrict__ y, int64_t n) {
  T* __restrict__ y0 = y[0];
  T* __restrict__ y1 = y[1];
  T* __restrict__ y2 = y[2];
  T* __restrict__ y3 = y[3];
  for (int64_t c = 0; c < n; ++c) {
    T s[8];
    for (int j = 0; j < 4; ++j) {
      const T m0 = m[j * ms + c], m1 = m[(4 + j) * ms + c], m2 = m[(8 + j) * ms + c], m3 = m[(12 + j) * ms + c];
      s[j] = m0 + m1 + m2;
      s[4 + j] = m1 - m2 - m3;
    }
    y0[c] = s[0] + s[1] + s[2];
    y1[c] = s[1] - s[2] - s[3];
    y2[c] = s[4] + s[5] + s[6];
    y3[c] = s[5] - s[6] - s[7];
  }
}

MCX_TARGET_CLONES void input_transform(const float* d, int64_t ds, float* r, float* v, int64_t vs, int64_t n) {
  input_transform_t(d, ds, r, v, vs, n);
}
MCX_TARGET_CLONES void input_transform(const double* d, int64_t ds, double* r, double* v, int64_t vs, int64_t n) {
  input_transform_t(d, ds, r, v, vs, n);
}
MCX_TARGET_CLONES void output_transform(const float* m, int64_t ms, float* const* y, int64_t n) {
  output_transform_t(m, ms, y, n);
}
MCX_TARGET_CLONES void output_transform(const double* m, int64_t ms, double* const* y, int64_t n) {
  output_transform_t(m, ms, y, n);
}

// U = G g G^T for every (input, output) channel pair, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]:
// 16 matrices [channels, out_channels].
template <typename T>
Buffer kernel_transform(const Winograd3x3& p, const T* R) {
  Buffer u = Buffer::uninitialized(dtype_v<T>, {16 * p.channels * p.out_channels});
  T* out = u.mutable_data<T>();
  const int64_t plane = p.channels * p.out_channels;
  for (int64_t c = 0; c < p.channels; ++c) {
    for (int64_t o = 0; o < p.out_channels; ++o) {
      T g[3][3], t[4][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) g[i][j] = R[o * p.rhs_out + c * p.rhs_in + i * p.rhs_h + j * p.rhs_w];
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[0][j];
        t[1][j] = (g[0][j] + g[1][j] + g[2][j]) / 2;
        t[2][j] = (g[0][j] - g[1][j] + g[2][j]) / 2;
        t[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; ++i) {
        const T row[4] = {t[i][0], (t[i][0] + t[i][1] + t[i][2]) / 2, (t[i][0] - t[i][1] + t[i][2]) / 2, t[i][2]};
        for (int j = 0; j < 4; ++j) out[(4 * i + j) * plane + c * p.out_channels + o] = row[j];
      }
    }
  }
  return u;
}

}  // namespace

bool winograd_pays_off(const Winograd3x3& p) {
  return p.channels >= 16 && p.out_channels >= 16 && p.out_h >= 2 && p.out_w >= 2;
}

template <typename T>
void conv_winograd_3x3(const Winograd3x3& p, const T* L, const T* R, T* Y) {
  const int64_t C = p.channels, O = p.out_channels;
  // Tiles are numbered across the batch (image-major), so one block's GEMMs may span several images.
  const int64_t tiles_w = (p.out_w + 1) / 2, per_image = (p.out_h + 1) / 2 * tiles_w, tiles = p.batch * per_image;
  const int64_t block = std::clamp<int64_t>(kBlockElements / (16 * (C + O)), 1, tiles);
  const int64_t blocks = (tiles + block - 1) / block;
  const Buffer u = kernel_transform(p, R);
  // Blocks [u0, u1): gather and transform the input tiles, 16 GEMMs, transform back.
  auto run_blocks = [&](int64_t u0, int64_t u1) {
    Buffer v_buf = Buffer::uninitialized(dtype_v<T>, {16 * block * C});
    Buffer m_buf = Buffer::uninitialized(dtype_v<T>, {16 * block * O});
    Buffer d_buf = Buffer::uninitialized(dtype_v<T>, {16 * C});  // one input tile
    Buffer r_buf = Buffer::uninitialized(dtype_v<T>, {16 * C});  // its row transform
    Buffer spill = Buffer::uninitialized(dtype_v<T>, {O});  // outputs past an odd edge
    T* v = v_buf.mutable_data<T>();
    T* m = m_buf.mutable_data<T>();
    T* d = d_buf.mutable_data<T>();
    for (int64_t unit = u0; unit < u1; ++unit) {
      const int64_t t0 = unit * block, t1 = std::min(tiles, t0 + block), n = t1 - t0;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / per_image, in_image = t % per_image;
        const T* image = L + b * p.lhs_batch;
        const int64_t h0 = (in_image / tiles_w) * 2 - p.pad_top, w0 = (in_image % tiles_w) * 2 - p.pad_left;
        for (int e = 0; e < 16; ++e) {
          const int64_t h = h0 + e / 4, w = w0 + e % 4;
          T* dst = d + e * C;
          if (h < 0 || h >= p.in_h || w < 0 || w >= p.in_w) {
            std::fill(dst, dst + C, T(0));
            continue;
          }
          const T* src = image + h * p.lhs_h + w * p.lhs_w;
          if (p.lhs_channel == 1) {
            std::copy(src, src + C, dst);
          } else {
            for (int64_t c = 0; c < C; ++c) dst[c] = src[c * p.lhs_channel];
          }
        }
        input_transform(d, C, r_buf.mutable_data<T>(), v + (t - t0) * C, n * C, C);
      }
      for (int e = 0; e < 16; ++e) {
        blas_gemm(false, false, n, O, C, v + e * n * C, C, u.data<T>() + e * C * O, O, T(0), m + e * n * O, O);
      }
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / per_image, in_image = t % per_image;
        const int64_t oh = (in_image / tiles_w) * 2, ow = (in_image % tiles_w) * 2;
        T* y[4];
        for (int k = 0; k < 4; ++k) {
          const int64_t h = oh + k / 2, w = ow + k % 2;
          y[k] = h < p.out_h && w < p.out_w ? Y + ((b * p.out_h + h) * p.out_w + w) * O : spill.mutable_data<T>();
        }
        output_transform(m + (t - t0) * O, n * O, y, O);
      }
    }
  };
  const int threads = intra_op_threads();
  if (threads > 1 && blocks >= threads) {  // one single-threaded GEMM per worker
    ScopedBlasOnCaller on_caller;
    parallel_for(blocks, 1, run_blocks);
  } else {  // too few blocks to share: OpenBLAS threads each GEMM
    run_blocks(0, blocks);
  }
}

template void conv_winograd_3x3<float>(const Winograd3x3&, const float*, const float*, float*);
template void conv_winograd_3x3<double>(const Winograd3x3&, const double*, const double*, double*);

}  // namespace mcx::cpu
