// VJP rules of conv_general_dilated and reduce_window (op.h, opset 3); see vjp_rules.h.
//
// Convolutions follow JAX's transpose rules (_conv_general_dilated_transpose_lhs/_rhs): each gradient is
// another conv_general_dilated whose dimension numbers, strides, dilations and paddings are derived from
// the forward ones. JAX's rhs rule uses batch_group_count for feature groups; mcx has no batch groups and
// moves the group factor of lhs's feature dim into its batch dim instead (a reshape), which turns the
// same computation into a feature-grouped convolution.
#include <functional>
#include <limits>
#include <numeric>

#include "mcx/core/error.h"
#include "mcx/ir/vjp_rules.h"
#include "mcx/ir/window_rules.h"

namespace mcx::ir::internal {
namespace {

constexpr ValueId kNone = -1;

std::vector<int64_t> swap_first_two(std::vector<int64_t> spec) {
  std::swap(spec[0], spec[1]);
  return spec;
}

// Per spatial dim of a convolution, the sizes JAX's transpose paddings are made of: the lhs after lhs
// dilation, the window after rhs dilation, and the result dilated by the window strides.
struct Dilated {
  DimExpr lhs, window, out;
};

std::vector<Dilated> dilated_dims(const ConvConfig& c, const Shape& lhs, const Shape& rhs, const Shape& out) {
  std::vector<Dilated> d;
  for (int i = 0; i < c.spatial_rank(); ++i) {
    d.push_back({dilate_dim(lhs[c.lhs_spec[2 + i]], c.lhs_dilation[i]),
                 dilate_dim(rhs[c.rhs_spec[2 + i]], c.rhs_dilation[i]),
                 dilate_dim(out[c.out_spec[2 + i]], c.window_strides[i])});
  }
  return d;
}

// v reshaped to like's shape when the two differ only in the spelling of their DimExprs.
ValueId fit(ProgramBuilder& b, ValueId v, ValueId like) {
  Shape want = b.type(like).shape;
  if (b.type(v).shape == want) return v;
  return b.reshape(v, std::move(want));
}

// Splits dim src of x (size n, a multiple of `size`) into (size, n / size) at positions src, src + 1.
ValueId reshape_axis_out_of(ProgramBuilder& b, int64_t src, int64_t size, ValueId x) {
  Shape s = b.type(x).shape;
  DimExpr rest = floordiv(s[src], DimExpr(size));
  s[src] = DimExpr(size);
  s.insert(s.begin() + src + 1, rest);
  return b.reshape(x, std::move(s));
}

// Merges dim src of x into dim dst, src as the major part; dst numbers the dims after src is removed.
ValueId reshape_axis_into(ProgramBuilder& b, int64_t src, int64_t dst, ValueId x) {
  const Shape s = b.type(x).shape;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i)
    if (i != src) perm.push_back(i);
  perm.insert(perm.begin() + dst, src);
  Shape merged = s;
  merged.erase(merged.begin() + src);
  merged[dst] = merged[dst] * s[src];
  return b.reshape(b.transpose(x, std::move(perm)), std::move(merged));
}

ValueId conv(ProgramBuilder& b, ValueId lhs, ValueId rhs, const ConvConfig& c) {
  return b.emit_or_throw(OpKind::kConvGeneralDilated, {lhs, rhs}, conv_attrs(c));
}

// Cotangent of lhs: the cotangent convolved with the spatially reversed rhs, features swapped.
ValueId conv_lhs_grad(ProgramBuilder& b, const ConvConfig& c, ValueId lhs, ValueId rhs, ValueId ct) {
  const Shape ls = b.type(lhs).shape, cs = b.type(ct).shape;
  for (const DimExpr& d : ls)
    if (d.constant_value() == 0) return b.full_like(lhs, 0.0);  // nothing to differentiate
  const int64_t g = c.feature_group_count;
  if (g > 1) rhs = reshape_axis_into(b, c.rhs_spec[0], c.rhs_spec[1], reshape_axis_out_of(b, c.rhs_spec[0], g, rhs));
  const Shape rs = b.type(rhs).shape;
  ConvConfig t;
  t.lhs_spec = c.out_spec;
  t.rhs_spec = swap_first_two(c.rhs_spec);
  t.out_spec = c.lhs_spec;
  t.window_strides = c.lhs_dilation;
  t.lhs_dilation = c.window_strides;
  t.rhs_dilation = c.rhs_dilation;
  t.feature_group_count = g;
  const std::vector<Dilated> d = dilated_dims(c, ls, rs, cs);
  for (int i = 0; i < c.spatial_rank(); ++i) {
    const DimExpr before = d[i].window - c.padding_low[i] - DimExpr(1);
    t.padding_low.push_back(before);
    t.padding_high.push_back(d[i].lhs + d[i].window - DimExpr(1) - d[i].out - before);
  }
  std::vector<int64_t> spatial(c.rhs_spec.begin() + 2, c.rhs_spec.end());
  ValueId reversed = spatial.empty() ? rhs : b.emit_or_throw(OpKind::kReverse, {rhs}, {{"dimensions", spatial}});
  return fit(b, conv(b, ct, reversed, t), lhs);
}

// Cotangent of rhs: lhs convolved with the cotangent, batch and feature roles swapped on both.
ValueId conv_rhs_grad(ProgramBuilder& b, const ConvConfig& c, ValueId lhs, ValueId rhs, ValueId ct) {
  const Shape ls = b.type(lhs).shape, rs = b.type(rhs).shape, cs = b.type(ct).shape;
  const int64_t g = c.feature_group_count;
  // Feature group j of lhs pairs with output-feature group j: moving the group factor into lhs's batch
  // dim (group major) makes it the feature group of the transposed convolution, whose features are
  // lhs's batch dim.
  if (g > 1) lhs = reshape_axis_into(b, c.lhs_spec[1], c.lhs_spec[0], reshape_axis_out_of(b, c.lhs_spec[1], g, lhs));
  ConvConfig t;
  t.lhs_spec = swap_first_two(c.lhs_spec);
  t.rhs_spec = swap_first_two(c.out_spec);
  t.out_spec = swap_first_two(c.rhs_spec);
  t.window_strides = c.rhs_dilation;
  t.lhs_dilation = c.lhs_dilation;
  t.rhs_dilation = c.window_strides;
  t.feature_group_count = g;
  const std::vector<Dilated> d = dilated_dims(c, ls, rs, cs);
  for (int i = 0; i < c.spatial_rank(); ++i) {
    t.padding_low.push_back(c.padding_low[i]);
    t.padding_high.push_back(d[i].out - d[i].lhs + d[i].window - c.padding_low[i] - DimExpr(1));
  }
  return fit(b, conv(b, lhs, ct, t), rhs);
}

// Every multi-index of a window, row-major.
std::vector<std::vector<int64_t>> window_offsets(const std::vector<int64_t>& window) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> w(window.size(), 0);
  const int64_t total = std::accumulate(window.begin(), window.end(), int64_t{1}, std::multiplies<>());
  for (int64_t k = 0; k < total; ++k) {
    out.push_back(w);
    for (int d = static_cast<int>(w.size()) - 1; d >= 0; --d) {
      if (++w[d] < window[d]) break;
      w[d] = 0;
    }
  }
  return out;
}

ValueId pad(ProgramBuilder& b, ValueId x, double value, Shape low, Shape high, std::vector<int64_t> interior) {
  ValueId pv = b.scalar_constant(b.type(x).dtype, value);
  return b.emit_or_throw(OpKind::kPad, {x, pv},
                         {{"low", std::move(low)}, {"high", std::move(high)}, {"interior", std::move(interior)}});
}

bool all_zero(const Shape& s) {
  for (const DimExpr& d : s)
    if (d != DimExpr(0)) return false;
  return true;
}

// reduce_window sum: every element receives the cotangents of the windows holding it, i.e. the
// cotangent dilated by the strides, padded, and summed over windows (JAX's transpose rule).
ValueId window_sum_grad(ProgramBuilder& b, const ReduceWindowConfig& c, ValueId x, ValueId ct) {
  const Shape xs = b.type(x).shape, cs = b.type(ct).shape;
  const size_t rank = xs.size();
  Shape low, high;
  std::vector<int64_t> interior;
  for (size_t d = 0; d < rank; ++d) {
    const DimExpr win(c.window_dimensions[d]);
    const DimExpr before = win - c.padding_low[d] - DimExpr(1);
    low.push_back(before);
    high.push_back(xs[d] + win - DimExpr(1) - dilate_dim(cs[d], c.window_strides[d]) - before);
    interior.push_back(c.window_strides[d] - 1);
  }
  ValueId padded = pad(b, ct, 0.0, low, high, interior);
  ReduceWindowConfig t = c;
  t.window_strides.assign(rank, 1);
  t.padding_low.assign(rank, DimExpr(0));
  t.padding_high.assign(rank, DimExpr(0));
  return fit(b, b.emit_or_throw(OpKind::kReduceWindow, {padded}, reduce_window_attrs(t)), x);
}

// reduce_window max/min: select and scatter. For each window offset w (row-major), the strided slice of
// the padded operand at w holds each window's element w; a window's cotangent goes to its first element
// equal to the result. With strides equal to the windows the windows tile the operand and the per-offset
// cotangents interleave by a transpose; otherwise each is scattered back by an interior pad and summed.
ValueId window_select_grad(ProgramBuilder& b, const ReduceWindowConfig& c, ValueId x, ValueId z, ValueId ct) {
  const Shape xs = b.type(x).shape, zs = b.type(z).shape;
  const int64_t rank = static_cast<int64_t>(xs.size());
  const double fill = c.reduce == ReduceOp::kMax ? -std::numeric_limits<double>::infinity()
                                                 : std::numeric_limits<double>::infinity();
  const bool padded = !all_zero(c.padding_low) || !all_zero(c.padding_high);
  ValueId xp = padded ? pad(b, x, fill, c.padding_low, c.padding_high, std::vector<int64_t>(rank, 0)) : x;
  const Shape ps = b.type(xp).shape;
  const ValueId zero = b.full_like(ct, 0.0);
  std::vector<ValueId> parts;
  ValueId taken = kNone, sum = kNone;
  const bool tiled = c.window_strides == c.window_dimensions;
  std::vector<int64_t> holes;  // between the windows' elements w, w + stride, ...: stride - 1
  for (int64_t s : c.window_strides) holes.push_back(s - 1);
  for (const std::vector<int64_t>& w : window_offsets(c.window_dimensions)) {
    Shape start, limit;
    for (int64_t d = 0; d < rank; ++d) {
      start.push_back(DimExpr(w[d]));
      limit.push_back(DimExpr(w[d]) + dilate_dim(zs[d], c.window_strides[d]));
    }
    ValueId elem = b.emit_or_throw(OpKind::kSlice, {xp}, {{"start", start}, {"limit", limit}, {"strides", c.window_strides}});
    ValueId hit = b.binary(OpKind::kEq, fit(b, elem, z), z);
    ValueId first = taken == kNone ? hit : b.binary(OpKind::kAnd, hit, b.unary(OpKind::kNot, taken));
    taken = taken == kNone ? hit : b.binary(OpKind::kOr, taken, hit);
    ValueId part = b.select(first, ct, zero);
    if (tiled) {
      parts.push_back(part);
      continue;
    }
    Shape high;
    for (int64_t d = 0; d < rank; ++d) high.push_back(ps[d] - limit[d]);
    ValueId scattered = fit(b, pad(b, part, 0.0, start, high, holes), xp);
    sum = sum == kNone ? scattered : b.binary(OpKind::kAdd, sum, scattered);
  }
  Shape crop_low, crop_high;
  for (int64_t d = 0; d < rank; ++d) crop_low.push_back(-c.padding_low[d]);
  if (tiled) {
    // parts[k] is [z...]; stacked [w..., z...] -> interleaved [z0, w0, z1, w1, ...] -> [z0*w0, ...].
    Shape one = zs, stacked;
    one.insert(one.begin(), DimExpr(1));
    std::vector<ValueId> rows;
    for (ValueId p : parts) rows.push_back(b.reshape(p, one));
    ValueId all = rows.size() == 1 ? rows[0] : b.emit_or_throw(OpKind::kConcatenate, rows, {{"dimension", int64_t{0}}});
    for (int64_t wd : c.window_dimensions) stacked.push_back(DimExpr(wd));
    stacked.insert(stacked.end(), zs.begin(), zs.end());
    std::vector<int64_t> perm;
    Shape tiled_shape;
    for (int64_t d = 0; d < rank; ++d) {
      perm.push_back(rank + d);
      perm.push_back(d);
      tiled_shape.push_back(zs[d] * DimExpr(c.window_dimensions[d]));
    }
    sum = b.reshape(b.transpose(b.reshape(all, stacked), perm), tiled_shape);
    // The tiles cover the padded operand but for a remainder at each dim's end; crop_high may grow it.
    for (int64_t d = 0; d < rank; ++d) crop_high.push_back(xs[d] + c.padding_low[d] - tiled_shape[d]);
  } else {
    for (int64_t d = 0; d < rank; ++d) crop_high.push_back(-c.padding_high[d]);
  }
  if (all_zero(crop_low) && all_zero(crop_high)) return fit(b, sum, x);
  return fit(b, pad(b, sum, 0.0, crop_low, crop_high, std::vector<int64_t>(rank, 0)), x);
}

}  // namespace

std::vector<ValueId> conv_vjp_rule(ProgramBuilder& b, const Instr& in, ValueId lhs, ValueId rhs, ValueId ct,
                                   const std::vector<bool>& need) {
  const ConvConfig c = value_or_throw(get_conv_config(in.attrs, b.type(lhs).rank()));
  std::vector<ValueId> out(2, kNone);
  if (need[0]) out[0] = conv_lhs_grad(b, c, lhs, rhs, ct);
  if (need[1]) out[1] = conv_rhs_grad(b, c, lhs, rhs, ct);
  return out;
}

ValueId reduce_window_vjp_rule(ProgramBuilder& b, const Instr& in, ValueId x, ValueId z, ValueId ct) {
  const ReduceWindowConfig c = value_or_throw(get_reduce_window_config(in.attrs, b.type(x).rank()));
  if (c.reduce == ReduceOp::kSum) return window_sum_grad(b, c, x, ct);
  return window_select_grad(b, c, x, z, ct);
}

}  // namespace mcx::ir::internal
