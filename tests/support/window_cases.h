// Convolution and reduce_window configurations shared by the IR (shape rules, VJPs), backend (kernels
// against the reference) and partitioner tests: strides, paddings (also negative), lhs and rhs dilations,
// feature groups, layouts, 1-D/2-D/3-D and the weight-gradient shape (window larger than the output).
#pragma once

#include <string>
#include <vector>

#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/window_rules.h"

namespace mcx::test {

struct ConvCase {
  std::string name;
  std::vector<int64_t> lhs, rhs;  // operand dims
  std::vector<int64_t> lhs_spec, rhs_spec, out_spec;
  std::vector<int64_t> strides, lhs_dilation, rhs_dilation, low, high;
  int64_t groups = 1;

  ir::Attrs attrs() const {
    ir::ConvConfig c;
    c.lhs_spec = lhs_spec;
    c.rhs_spec = rhs_spec;
    c.out_spec = out_spec;
    c.window_strides = strides;
    c.lhs_dilation = lhs_dilation;
    c.rhs_dilation = rhs_dilation;
    c.padding_low = concrete_shape(low);
    c.padding_high = concrete_shape(high);
    c.feature_group_count = groups;
    return ir::conv_attrs(c);
  }
};

inline void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<ConvCase> conv_cases() {
  using V = std::vector<int64_t>;
  const V nhwc{0, 3, 1, 2}, hwio{3, 2, 0, 1};
  return {
      {"nhwc_same", {2, 5, 6, 3}, {3, 3, 3, 4}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
      {"strided_valid", {2, 7, 6, 2}, {3, 2, 2, 3}, nhwc, hwio, nhwc, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
      {"rhs_dilated", {1, 7, 7, 2}, {2, 2, 2, 3}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {2, 3}, {1, 0}, {0, 2}},
      {"lhs_dilated", {2, 4, 3, 2}, {3, 3, 2, 2}, nhwc, hwio, nhwc, {1, 1}, {2, 2}, {1, 1}, {2, 1}, {2, 2}},
      {"strided_lhs_dilated", {1, 5, 4, 2}, {3, 2, 2, 2}, nhwc, hwio, nhwc, {2, 3}, {2, 3}, {1, 2}, {1, 0}, {1, 1}},
      {"grouped", {2, 5, 5, 4}, {3, 3, 2, 6}, nhwc, hwio, nhwc, {1, 2}, {1, 1}, {1, 1}, {1, 0}, {1, 1}, 2},
      {"depthwise", {1, 6, 5, 3}, {3, 3, 1, 3}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 3},
      {"nchw_oihw", {2, 3, 6, 5}, {4, 3, 3, 2}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {1, 2}, {1, 1}, {1, 1},
       {1, 0}, {1, 1}},
      {"permuted_layouts", {3, 2, 5, 4}, {5, 2, 2, 3}, {1, 2, 3, 0}, {3, 0, 1, 2}, {3, 1, 2, 0}, {1, 1}, {1, 1},
       {1, 1}, {0, 1}, {1, 0}},
      {"conv1d_negative_padding", {2, 9, 3}, {2, 3, 4}, {0, 2, 1}, {2, 1, 0}, {0, 2, 1}, {2}, {1}, {1}, {-1}, {1}},
      {"conv3d", {1, 4, 4, 3, 2}, {2, 2, 2, 2, 3}, {0, 4, 1, 2, 3}, {4, 3, 0, 1, 2}, {0, 4, 1, 2, 3}, {1, 2, 1},
       {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}},
      {"window_larger_than_output", {3, 9, 9, 2}, {8, 8, 2, 3}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1}, {0, 0},
       {0, 0}},
      {"weight_grad_grouped", {2, 8, 8, 4}, {7, 6, 2, 4}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1}, {0, 1}, {0, 0}, 2},
      {"no_spatial_dims", {3, 4}, {5, 4}, {0, 1}, {0, 1}, {0, 1}, {}, {}, {}, {}, {}},
  };
}

// Convolutions the CPU backend runs by Winograd F(2x2, 3x3) (3x3, stride 1, >= 16 channels in and out):
// partial tiles at odd edges, asymmetric padding, channels-first layouts. Too large for the finite-
// difference tests; the backend tests compare them with the reference.
inline std::vector<ConvCase> winograd_conv_cases() {
  using V = std::vector<int64_t>;
  const V nhwc{0, 3, 1, 2}, hwio{3, 2, 0, 1}, nchw{0, 1, 2, 3};
  return {
      {"winograd_same_odd_height", {2, 7, 6, 16}, {3, 3, 16, 16}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1}, {1, 1},
       {1, 1}},
      {"winograd_valid_nchw_odd_width", {1, 16, 6, 9}, {17, 16, 3, 3}, nchw, nchw, nchw, {1, 1}, {1, 1}, {1, 1},
       {0, 0}, {0, 0}},
      {"winograd_asymmetric_padding", {3, 5, 5, 16}, {3, 3, 16, 20}, nhwc, hwio, nhwc, {1, 1}, {1, 1}, {1, 1},
       {2, 0}, {0, 1}},
  };
}

struct WindowCase {
  std::string name;
  std::vector<int64_t> dims, window, strides, low, high;
};

inline void PrintTo(const WindowCase& c, std::ostream* os) { *os << c.name; }

inline ir::Attrs window_attrs(const WindowCase& c, ReduceOp op) {
  ir::ReduceWindowConfig w;
  w.reduce = op;
  w.window_dimensions = c.window;
  w.window_strides = c.strides;
  w.padding_low = concrete_shape(c.low);
  w.padding_high = concrete_shape(c.high);
  return ir::reduce_window_attrs(w);
}

inline std::vector<WindowCase> window_cases() {
  return {
      {"pool2x2_nhwc", {2, 6, 4, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0}, {0, 0, 0, 0}},
      {"pool3x3_overlapping_padded", {2, 5, 6, 2}, {1, 3, 3, 1}, {1, 2, 1, 1}, {0, 1, 1, 0}, {0, 1, 0, 0}},
      {"pool_tiled_with_remainder", {1, 7, 5, 2}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0, 1, 0, 0}, {0, 0, 0, 0}},
      {"window_on_last_dim", {3, 8}, {2, 3}, {1, 2}, {0, 1}, {1, 1}},
      {"nchw_pool", {2, 2, 6, 5}, {1, 1, 2, 3}, {1, 1, 2, 2}, {0, 0, 0, 1}, {0, 0, 1, 0}},
      {"one_d", {10}, {4}, {3}, {2}, {1}},
  };
}

}  // namespace mcx::test
