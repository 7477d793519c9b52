// Winograd F(2x2, 3x3) for the convolutions CNNs spend their time in: 2-D, 3x3 windows, stride 1, no
// dilation, one feature group (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
// Internal to the CPU backend; conv.cc picks it when winograd_pays_off.
//
// Each 2x2 block of outputs is computed from a 4x4 input tile: V = B^T d B per tile and channel,
// U = G g G^T per kernel (once per call), then for each of the 16 transformed positions one GEMM
// [tiles, C] x [C, O] (OpenBLAS), and Y = A^T M A back to 2x2 outputs: 16 multiplications per 4 outputs
// instead of 36, at the cost of two cheap transforms (vectorised over channels). Padding is read as
// zeros; outputs past an odd edge are computed and dropped. Blocks of tiles (numbered across the batch)
// run in parallel on the thread pool with single-threaded GEMMs, or one after the other with OpenBLAS
// threading each GEMM when there are fewer blocks than threads; results do not depend on the thread count.
// For finite values the result differs from the direct sum by rounding only (the transforms add, subtract
// and halve); an infinite input may give NaN where the direct sum gives an infinity.
#pragma once

#include <cstdint>

namespace mcx::cpu {

// One such convolution in canonical terms: lhs L[b, c, h, w] and rhs R[o, c, kh, kw] with element
// strides (any sign), result Y[b, oh, ow, o] contiguous.
struct Winograd3x3 {
  int64_t batch = 0, channels = 0, out_channels = 0;
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0, pad_top = 0, pad_left = 0;
  int64_t lhs_batch = 0, lhs_channel = 0, lhs_h = 0, lhs_w = 0;
  int64_t rhs_out = 0, rhs_in = 0, rhs_h = 0, rhs_w = 0;
};

// Whether the GEMMs get enough channels (16 or more on both sides) and the output at least one tile.
bool winograd_pays_off(const Winograd3x3& problem);

// T is float or double.
template <typename T>
void conv_winograd_3x3(const Winograd3x3& problem, const T* lhs, const T* rhs, T* out);

}  // namespace mcx::cpu
