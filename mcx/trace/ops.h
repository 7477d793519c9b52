// The ops library: numpy/jax.numpy-like functions on Array.
//
// Every function works the same eagerly and under jit/grad (it goes through bind(), dispatch.h).
// Binary and ternary ops broadcast with numpy rules (trailing dimensions aligned; a dimension of 1
// stretches; symbolic dimensions must be equal) and promote dtypes with promote_types (dtype.h), where a
// weakly typed scalar (a C++ number, see array.h) takes the other operand's dtype. Errors are
// mcx::InvalidArgument starting with the op's name and naming the shapes, e.g.
//   [add] shapes [3,4] and [5] cannot be broadcast: dimension 1 is 4 vs 5
// Axes may be negative (counted from the end); an out-of-range axis names the op, axis and rank.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mcx/core/reduce_op.h"
#include "mcx/core/dtype.h"
#include "mcx/core/shape.h"
#include "mcx/trace/array.h"

namespace mcx {

// A set of axes for reductions: sum(x) (all axes), sum(x, 1), sum(x, {0, 2}).
class Axes {
 public:
  Axes() = default;  // all axes
  Axes(int axis) : axes_(std::vector<int>{axis}) {}  // NOLINT
  Axes(std::initializer_list<int> axes) : axes_(std::vector<int>(axes)) {}
  Axes(std::vector<int> axes) : axes_(std::move(axes)) {}  // NOLINT
  bool all() const { return !axes_.has_value(); }
  const std::vector<int>& list() const { return *axes_; }
  // Normalised, sorted, unique axes for a rank; InvalidArgument "[api] axis 3 is out of range for rank 2".
  std::vector<int64_t> resolve(int rank, const char* api) const;

 private:
  std::optional<std::vector<int>> axes_;
};

// ---- creation ---------------------------------------------------------------------------------------
Array zeros(const Shape& shape, DType dtype = DType::kFloat32);
Array ones(const Shape& shape, DType dtype = DType::kFloat32);
Array full(const Shape& shape, const Array& value);                 // value's dtype (weak -> f32/i32)
Array full(const Shape& shape, const Array& value, DType dtype);
Array zeros_like(const Array& x);
Array ones_like(const Array& x);
Array full_like(const Array& x, const Array& value);
// Values 0, 1, ... along `dimension` of shape.
Array iota(const Shape& shape, int dimension = 0, DType dtype = DType::kInt32);
// [0, stop) and [start, stop) with step, as numpy.arange (dtype i32 unless given).
Array arange(int64_t stop, DType dtype = DType::kInt32);
Array arange(double start, double stop, double step = 1.0, DType dtype = DType::kInt32);
// Identity matrix n x n.
Array eye(int64_t n, DType dtype = DType::kFloat32);
// A dimension as a scalar value (JAX's jnp.array(x.shape[0]) under shape polymorphism): a constant for a
// concrete dimension; for a symbolic one, computed in the program from its variables (each counted from an
// array of that size), so an exported function gives the value of the call's shapes. Integer dtypes only
// (InvalidArgument otherwise); floor division and modulo as DimExpr's.
Array dimension_as_value(const DimExpr& dim, DType dtype = DType::kInt32);

// ---- elementwise unary ------------------------------------------------------------------------------
Array negative(const Array& x);
Array abs(const Array& x);
Array sign(const Array& x);
Array exp(const Array& x);
Array log(const Array& x);
Array log1p(const Array& x);
Array expm1(const Array& x);
Array tanh(const Array& x);
Array sigmoid(const Array& x);  // the logistic function (op "logistic")
Array sqrt(const Array& x);
Array rsqrt(const Array& x);
Array floor(const Array& x);
Array ceil(const Array& x);
Array round(const Array& x);  // half away from zero
Array sin(const Array& x);
Array cos(const Array& x);
// The error function (jax.lax.erf); a program using it is exported at opset 4.
Array erf(const Array& x);
// 1 - erf(x), accurate where erf(x) rounds to 1 (jax.lax.erfc), and the inverse error function
// (jax.lax.erf_inv: +-inf at +-1, NaN outside [-1, 1]); programs using them are exported at opset 5.
// mcx::random::erf_inv is XLA's single-precision polynomial, kept for bit-compatible normal sampling.
Array erfc(const Array& x);
Array erf_inv(const Array& x);
Array logical_not(const Array& x);  // bool: logical; integers: bitwise
Array isfinite(const Array& x);
Array square(const Array& x);
Array reciprocal(const Array& x);
// Blocks gradients: the value passes through, its cotangent is zero.
Array stop_gradient(const Array& x);
// Transcendental ops on integer/bool inputs compute in f32 (as jax.numpy does).
Array astype(const Array& x, DType dtype);

// ---- elementwise binary (broadcasting, promoting) ---------------------------------------------------
Array add(const Array& x, const Array& y);
Array subtract(const Array& x, const Array& y);
Array multiply(const Array& x, const Array& y);
// True division: integer operands are converted to f32 first (like jax.numpy.divide).
Array divide(const Array& x, const Array& y);
Array remainder(const Array& x, const Array& y);  // sign of x (C fmod semantics, op "rem")
Array power(const Array& x, const Array& y);
Array maximum(const Array& x, const Array& y);
Array minimum(const Array& x, const Array& y);
Array logical_and(const Array& x, const Array& y);
Array logical_or(const Array& x, const Array& y);
Array logical_xor(const Array& x, const Array& y);
Array equal(const Array& x, const Array& y);  // comparisons return bool arrays
Array not_equal(const Array& x, const Array& y);
Array less(const Array& x, const Array& y);
Array less_equal(const Array& x, const Array& y);
Array greater(const Array& x, const Array& y);
Array greater_equal(const Array& x, const Array& y);

// ---- ternary ----------------------------------------------------------------------------------------
// Elementwise cond ? x : y (cond converted to bool when it is not); all three broadcast together.
Array where(const Array& cond, const Array& x, const Array& y);
// lax.clamp(lo, x, hi) and numpy.clip(x, lo, hi).
Array clamp(const Array& lo, const Array& x, const Array& hi);
Array clip(const Array& x, const Array& lo, const Array& hi);

// ---- shape manipulation -----------------------------------------------------------------------------
Array broadcast_to(const Array& x, const Shape& shape);
// Broadcasts all arrays to their common shape (dtypes unchanged).
std::vector<Array> broadcast_arrays(const std::vector<Array>& xs);
// One dimension may be -1 (inferred; concrete shapes only).
Array reshape(const Array& x, const Shape& shape);
Array flatten(const Array& x);  // to 1-d
// Default permutation reverses the axes.
Array transpose(const Array& x, std::vector<int64_t> permutation = {});
Array swapaxes(const Array& x, int axis1, int axis2);
Array expand_dims(const Array& x, int axis);
Array squeeze(const Array& x, Axes axes = {});  // all size-1 dims by default
// Static slice; strides default to 1.
Array slice(const Array& x, const Shape& start, const Shape& limit, std::vector<int64_t> strides = {});
// Slice of sizes at run-time starts (integer scalars; clamped into range as XLA does).
Array dynamic_slice(const Array& x, const std::vector<Array>& starts, const Shape& sizes);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts);
Array concatenate(const std::vector<Array>& xs, int axis = 0);  // promotes dtypes
Array stack(const std::vector<Array>& xs, int axis = 0);
// Pads with value; low/high may be negative (cropping); interior inserts between elements.
Array pad(const Array& x, const Shape& low, const Shape& high, const Array& value = 0,
          std::vector<int64_t> interior = {});
Array reverse(const Array& x, Axes axes);

// ---- reductions -------------------------------------------------------------------------------------
Array sum(const Array& x, Axes axes = {}, bool keepdims = false);
Array max(const Array& x, Axes axes = {}, bool keepdims = false);
Array min(const Array& x, Axes axes = {}, bool keepdims = false);
Array prod(const Array& x, Axes axes = {}, bool keepdims = false);
Array mean(const Array& x, Axes axes = {}, bool keepdims = false);  // integer inputs give f32
Array var(const Array& x, Axes axes = {}, bool keepdims = false, int ddof = 0);
// Index (i32) of the first extreme value along axis; NaN counts as the extreme.
Array argmax(const Array& x, int axis, bool keepdims = false);
Array argmin(const Array& x, int axis, bool keepdims = false);
Array cumsum(const Array& x, int axis, bool reverse = false);
// Cumulative product, maximum and minimum along axis (jax.lax.cumprod/cummax/cummin; reverse scans from the
// end), by a log-depth scan of multiply/maximum/minimum (ops_scan.cc). max/min propagate NaN; gradients
// follow those ops (ties of maximum/minimum split the cotangent). The axis length must be static.
Array cumprod(const Array& x, int axis, bool reverse = false);
Array cummax(const Array& x, int axis, bool reverse = false);
Array cummin(const Array& x, int axis, bool reverse = false);
// log(sum(exp(x))) computed stably: the max is subtracted (under stop_gradient) and added back.
Array logsumexp(const Array& x, Axes axes = {}, bool keepdims = false);

// ---- neural-network helpers -------------------------------------------------------------------------
Array softmax(const Array& x, Axes axes = -1);
Array log_softmax(const Array& x, Axes axes = -1);
Array relu(const Array& x);
// approximate=true: the tanh approximation; false: the exact form 0.5 x (1 + erf(x / sqrt 2)) (jax.nn.gelu).
Array gelu(const Array& x, bool approximate = true);
// One-hot encoding of integer indices: result shape indices.shape + [num_classes].
Array one_hot(const Array& indices, int64_t num_classes, DType dtype = DType::kFloat32);

// ---- linear algebra ---------------------------------------------------------------------------------
struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
};
// lax.dot_general; operands are promoted to a common dtype. Result dims: batch, lhs free, rhs free.
Array dot_general(const Array& lhs, const Array& rhs, const DotDims& dims);
// numpy.matmul: 1-d operands are promoted to matrices and the added dim removed; leading dims broadcast
// as batch dims. "[matmul] contracting dimensions differ: lhs f32[4,3] dim 1 is 3, rhs f32[5,2] dim 0 is 5".
Array matmul(const Array& a, const Array& b);

// ---- convolution and pooling ------------------------------------------------------------------------
// Padding of the spatial dims of a convolution or a pooling window: explicit (low, high) pairs, or a
// rule resolved from the shapes as JAX's padtype_to_pads does.
class Padding {
 public:
  // No padding: windows that would stick out at the end are dropped.
  static Padding valid();
  // Output size ceil(input / stride); the total padding max(0, (out - 1) * stride + window - input) is
  // split evenly, the odd element at the end (same) or at the start (same_lower).
  static Padding same();
  static Padding same_lower();
  // Explicit (low, high) per spatial dimension; may be symbolic, and negative for convolutions.
  Padding(std::initializer_list<std::pair<DimExpr, DimExpr>> pairs);  // NOLINT: conv(x, w, {}, {{1, 1}, {1, 1}})
  Padding(std::vector<std::pair<DimExpr, DimExpr>> pairs);             // NOLINT

  // The (low, high) pairs for inputs of `in` elements per dimension, windows of `window` elements
  // (dilated) and strides; explicit pairs of another count are InvalidArgument "[api] ...".
  std::vector<std::pair<DimExpr, DimExpr>> resolve(const Shape& in, const Shape& window,
                                                    const std::vector<int64_t>& strides, const char* api) const;

 private:
  enum class Kind { kExplicit, kValid, kSame, kSameLower };
  explicit Padding(Kind kind) : kind_(kind) {}
  Kind kind_ = Kind::kExplicit;
  std::vector<std::pair<DimExpr, DimExpr>> pairs_;
};

// Which operand dims of a convolution are batch, feature and spatial, as JAX's dimension-number strings,
// e.g. {"NCHW", "OIHW", "NCHW"}: lhs and out name the batch 'N' and feature 'C' dims, rhs the output-
// feature 'O' and input-feature 'I' dims; every other letter is a spatial dim, matched by letter across
// the three strings and ordered as in rhs. Empty strings (the default) mean channels last for any rank:
// NHWC / HWIO / NHWC in 2-D.
struct ConvDimensionNumbers {
  std::string lhs, rhs, out;
};

// lax.conv_general_dilated (batch_group_count 1). window_strides, lhs_dilation and rhs_dilation have one
// entry per spatial dim (empty: all 1). feature_group_count splits the lhs features and the rhs output
// features into groups; the rhs input-feature dim is lhs features / groups (depthwise: groups = lhs
// features). Operands are promoted to a common dtype, integer ones to f32. Errors are InvalidArgument
// "[conv_general_dilated] expected ..., found ...".
Array conv_general_dilated(const Array& lhs, const Array& rhs, std::vector<int64_t> window_strides,
                           const Padding& padding, std::vector<int64_t> lhs_dilation = {},
                           std::vector<int64_t> rhs_dilation = {},
                           const ConvDimensionNumbers& dimension_numbers = {}, int64_t feature_group_count = 1);
// Channels-last convolution: x [N, spatial..., C], w [spatial..., C / groups, O] -> [N, spatial'..., O]
// (NHWC and HWIO in 2-D); strides and dilation (of the window) per spatial dim, empty: 1.
Array conv(const Array& x, const Array& w, std::vector<int64_t> strides = {}, const Padding& padding = Padding::same(),
           std::vector<int64_t> dilation = {}, int64_t feature_group_count = 1);

// lax.reduce_window with sum, max or min (ReduceOp::kProd is InvalidArgument): one window size and stride
// (empty: 1) per dim of x; the padding of every dim holds the reduction's identity (0, -inf, +inf).
// Gradients: sum spreads each window's cotangent over it; max/min give it to the window's first extreme
// element.
Array reduce_window(const Array& x, ReduceOp op, std::vector<int64_t> window_dimensions,
                    std::vector<int64_t> window_strides = {}, const Padding& padding = Padding::valid());
// Pooling over the spatial dims of channels-last x [N, spatial..., C], as flax.linen.max_pool/avg_pool:
// window_shape and strides per spatial dim (strides default to 1, as in flax: pass the window for
// non-overlapping pooling), padding of the spatial dims.
Array max_pool(const Array& x, std::vector<int64_t> window_shape, std::vector<int64_t> strides = {},
               const Padding& padding = Padding::valid());
// The window mean; with count_include_pad false, padding elements are left out of each window's count.
Array avg_pool(const Array& x, std::vector<int64_t> window_shape, std::vector<int64_t> strides = {},
               const Padding& padding = Padding::valid(), bool count_include_pad = true);

// ---- indexing ---------------------------------------------------------------------------------------
// Rows of x along axis at integer indices: result shape x.shape[:axis] + indices.shape + x.shape[axis+1:].
// Out-of-range indices are clamped (as XLA gather).
Array take(const Array& x, const Array& indices, int axis = 0);
// Adds each row of updates into x at its index along axis 0 (the transpose of take): x[N, ...],
// indices (int)[k...], updates[k..., ...]; repeated indices accumulate, out-of-range ones are clamped.
Array scatter_add(const Array& x, const Array& indices, const Array& updates);
// take_along_axis-style pick for classification losses: x[..., i] for integer labels of shape x.shape[:-1].
Array take_along_last(const Array& x, const Array& labels);
// jnp.take_along_axis: out[..., j, ...] = x[..., indices[..., j, ...], ...] along axis; indices have x's rank
// and x's shape outside axis (any length along it); out-of-range indices are clamped into the line.
// Differentiable in x (its gradient scatters back through take).
Array take_along_axis(const Array& x, const Array& indices, int axis);

// ---- sorting ----------------------------------------------------------------------------------------
// Stable sorts along axis (jnp.argsort / jnp.sort with stable=True): equal elements keep their order; NaN
// sorts above every number (last ascending, first descending); -0 and +0 are equal. argsort gives i32
// positions (a program using it is exported at opset 4); sort is take_along_axis(x, argsort(x)), so its
// gradient flows to the elements where they were. Bool arrays are refused (convert first).
Array argsort(const Array& x, int axis = -1, bool descending = false);
Array sort(const Array& x, int axis = -1, bool descending = false);
// Multi-operand sort (jax.lax.sort with is_stable=True): every operand reordered along axis by the first
// num_keys operands compared lexicographically (key 0 first; equal keys keep their order), e.g. values by
// their keys, or rows by (year, day). All operands have one shape; InvalidArgument names the one that does
// not, or a num_keys outside [1, number of operands]. Differentiable in the non-key operands and the keys
// (the permutation is a gather; its VJP scatters).
std::vector<Array> sort(const std::vector<Array>& operands, int axis, int num_keys = 1, bool descending = false);
// The k largest elements along the last axis, in descending order, and their positions (jax.lax.top_k; ties
// go to the lower position). InvalidArgument unless 0 <= k <= the last dimension.
std::pair<Array, Array> top_k(const Array& x, int64_t k);

// ---- operators --------------------------------------------------------------------------------------
Array operator+(const Array& x, const Array& y);
Array operator-(const Array& x, const Array& y);
Array operator*(const Array& x, const Array& y);
Array operator/(const Array& x, const Array& y);
Array operator-(const Array& x);
Array operator==(const Array& x, const Array& y);
Array operator!=(const Array& x, const Array& y);
Array operator<(const Array& x, const Array& y);
Array operator<=(const Array& x, const Array& y);
Array operator>(const Array& x, const Array& y);
Array operator>=(const Array& x, const Array& y);
// Scalar operands on either side (weakly typed): x * 2.0, 1.0 - x, x > 0.
#define MCX_SCALAR_OPERATOR_(op)                                                            \
  template <ArrayScalar T> Array operator op(const Array& x, T y) { return x op Array(y); } \
  template <ArrayScalar T> Array operator op(T x, const Array& y) { return Array(x) op y; }
MCX_SCALAR_OPERATOR_(+)
MCX_SCALAR_OPERATOR_(-)
MCX_SCALAR_OPERATOR_(*)
MCX_SCALAR_OPERATOR_(/)
MCX_SCALAR_OPERATOR_(==)
MCX_SCALAR_OPERATOR_(!=)
MCX_SCALAR_OPERATOR_(<)
MCX_SCALAR_OPERATOR_(<=)
MCX_SCALAR_OPERATOR_(>)
MCX_SCALAR_OPERATOR_(>=)
#undef MCX_SCALAR_OPERATOR_

// ---- helpers used by the library and by other layers --------------------------------------------------
// The dtype x and y promote to, honouring weak types.
DType result_type(const Array& x, const Array& y);
// The broadcast shape of two shapes; InvalidArgument "[api] shapes ... cannot be broadcast ..." otherwise.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* api = "broadcast_shapes");

}  // namespace mcx
