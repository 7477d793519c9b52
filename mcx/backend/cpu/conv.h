// conv_general_dilated on the CPU (op.h). Internal to the CPU backend: the executor passes verified
// programs, so the kernel assumes valid operands and attributes.
//
// Operands are read through strided views in whatever layout the dimension numbers give; the GEMMs run in
// OpenBLAS (float32 and float64; float16/bfloat16 are converted to float, computed, and rounded once).
// Two formulations of the same sum, chosen by shape:
//  - by output image (more output positions than window positions: forward convolutions and input
//    gradients): for each batch element and feature group, the windows of the output positions are
//    gathered into a [positions, window x features] matrix ("im2col") and multiplied by the rhs packed as
//    [window x features, output features]. Batch elements run in parallel on the thread pool with one
//    single-threaded GEMM each (ScopedBlasOnCaller); a batch smaller than the thread count runs one
//    multi-threaded GEMM at a time instead.
//  - by contracted feature (fewer output positions than window positions: the weight gradient of a
//    convolution, whose window is the cotangent's spatial extent): the result's rows are (output
//    position, batch element) and each contracted feature adds [window, rows]^T x [window, output
//    features]. Fixed, shape-determined slices of the features run in parallel into partial results that
//    are summed in order.
// 2-D 3x3 stride-1 convolutions with 16 or more channels in and out take Winograd F(2x2, 3x3) instead of
// the by-image GEMMs (conv_winograd.h). Results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/view.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cpu {

// The op's attributes (window_rules.h), with the paddings as integers.
struct ConvGeometry {
  ir::ConvConfig config;
  std::vector<int64_t> padding_low, padding_high;
};

// Decodes the attributes of a conv_general_dilated over operands of rank `rank`; InvalidArgument for
// malformed attributes or symbolic paddings (specialise the program first).
absl::StatusOr<ConvGeometry> conv_geometry(const ir::Attrs& attrs, int rank);

// The convolution of lhs and rhs (same floating dtype) into a new Buffer of out_dims (the op's result
// dims, which the shape rule computed).
Buffer conv_general_dilated(const View& lhs, const View& rhs, const ConvGeometry& geometry,
                            const std::vector<int64_t>& out_dims);

}  // namespace mcx::cpu
