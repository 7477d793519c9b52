// Attributes and shape rules of the windowed ops of opset 3 (op.h): conv_general_dilated and
// reduce_window.
//
// The get_* helpers decode and validate the attributes once, so that the shape rules, the backend's
// kernels, the reference evaluator, the VJP rules and the partitioner read them the same way. Every
// error is InvalidArgument starting with "[op_name] " and says what was expected and what was found.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/reduce_op.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"

namespace mcx::ir {

// conv_general_dilated's attributes (op.h). The specs are JAX's ConvDimensionNumbers: lhs_spec =
// (batch, feature, spatial...), rhs_spec = (output feature, input feature, spatial...), out_spec =
// (batch, feature, spatial...), each a permutation of the operand dims.
struct ConvConfig {
  std::vector<int64_t> lhs_spec, rhs_spec, out_spec;
  std::vector<int64_t> window_strides, lhs_dilation, rhs_dilation;
  Shape padding_low, padding_high;
  int64_t feature_group_count = 1;

  int spatial_rank() const { return static_cast<int>(window_strides.size()); }
};

// Decodes the attributes for operands of rank `rank` (>= 2) and checks them: every attribute present with
// its kind; specs are permutations of [0, rank); rank - 2 entries in each spatial list; strides and
// dilations >= 1; feature_group_count >= 1.
absl::StatusOr<ConvConfig> get_conv_config(const Attrs& attrs, int rank);
Attrs conv_attrs(const ConvConfig& config);

// reduce_window's attributes (op.h); `reduce` is a ReduceOp of collectives/communicator.h (sum, max or min).
struct ReduceWindowConfig {
  ReduceOp reduce = ReduceOp::kSum;
  std::vector<int64_t> window_dimensions, window_strides;
  Shape padding_low, padding_high;
};

// Decodes and checks reduce_window's attributes for an operand of rank `rank`: `reduce` is 0, 1 or 2;
// one entry per dimension in each list; windows and strides >= 1; constant paddings >= 0.
absl::StatusOr<ReduceWindowConfig> get_reduce_window_config(const Attrs& attrs, int rank);
Attrs reduce_window_attrs(const ReduceWindowConfig& config);

// A dimension of n elements with d - 1 holes between neighbours: (n - 1) * d + 1, or 0 when n is 0.
// A symbolic n with d > 1 is taken to be >= 1 (dimension variables are); callers check that.
DimExpr dilate_dim(const DimExpr& n, int64_t d);

// The shape rules (called by infer_type, which has checked the operand count and attribute names).
absl::StatusOr<AbstractValue> window_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                                const Attrs& attrs, const SymbolicScope& scope);

}  // namespace mcx::ir
