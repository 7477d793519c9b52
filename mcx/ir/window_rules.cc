#include "mcx/ir/window_rules.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
using internal::join;
namespace {

constexpr std::string_view kConv = "conv_general_dilated";
constexpr std::string_view kWindow = "reduce_window";

std::string ints_str(std::span<const int64_t> v) { return cat("[", join(v, ","), "]"); }

using internal::op_error;

// An attribute getter's result, its error prefixed with the op's name.
template <typename T>
absl::StatusOr<T> attr(std::string_view op, absl::StatusOr<T> v) {
  if (!v.ok()) return internal::with_op_prefix(op, v.status());
  return *std::move(v);
}

absl::Status check_count(std::string_view op, std::string_view name, size_t found, int expected) {
  if (static_cast<int>(found) != expected)
    return op_error(op, "expected ", expected, " entries in '", name, "', found ", found);
  return absl::OkStatus();
}

absl::Status check_positive(std::string_view op, std::string_view name, const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 1) return op_error(op, "expected '", name, "' entries >= 1, found ", ints_str(v));
  return absl::OkStatus();
}

absl::Status check_permutation(std::string_view op, std::string_view name, const std::vector<int64_t>& v,
                               int rank) {
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(v.size()) == rank;
  for (int64_t d : v) {
    if (!ok) break;
    ok = d >= 0 && d < rank && !seen[d];
    if (ok) seen[d] = true;
  }
  if (!ok) return op_error(op, "expected '", name, "' to be a permutation of the ", rank, " operand dims, found ", ints_str(v));
  return absl::OkStatus();
}

// A scope comparison a >= b that must be decided; `what` names it in the inconclusive error.
absl::StatusOr<bool> decided_ge(std::string_view op, const SymbolicScope& scope, const DimExpr& a, const DimExpr& b,
                                const std::string& what) {
  auto v = scope.ge(a, b);
  if (!v.ok()) return absl::Status(v.status().code(), cat("[", op, "] ", what, ": ", v.status().message()));
  return *v;
}

// Windows of `window` elements at `stride` over `padded` elements: (padded - window) // stride + 1, with
// padded >= window required.
absl::StatusOr<DimExpr> window_count(std::string_view op, const SymbolicScope& scope, const DimExpr& padded,
                                     const DimExpr& window, int64_t stride, const std::string& where) {
  MCX_ASSIGN_OR_RETURN(bool fits, decided_ge(op, scope, padded, window, cat(where, ": padded size >= window")));
  if (!fits)
    return op_error(op, where, ": expected the padded size to be at least the window ", window.to_string(), ", found ",
               padded.to_string());
  DimExpr span = padded - window;
  return (stride == 1 ? span : floordiv(span, DimExpr(stride))) + DimExpr(1);
}

bool known_equal(const SymbolicScope& scope, const DimExpr& a, const DimExpr& b) {
  return a == b || scope.known_equal(a, b);
}

absl::StatusOr<AbstractValue> conv_type(std::span<const AbstractValue> ops, const Attrs& attrs,
                                        const SymbolicScope& scope) {
  const AbstractValue& l = ops[0];
  const AbstractValue& r = ops[1];
  if (l.dtype != r.dtype)
    return op_error(kConv, "expected operands of one dtype, found lhs ", l.to_string(), " and rhs ", r.to_string());
  if (!is_floating(l.dtype)) return op_error(kConv, "expected floating operands, found ", l.to_string());
  if (l.rank() != r.rank() || l.rank() < 2)
    return op_error(kConv, "expected lhs and rhs of one rank >= 2 (batch, feature and spatial dims), found lhs ",
               l.to_string(), " and rhs ", r.to_string());
  MCX_ASSIGN_OR_RETURN(ConvConfig c, get_conv_config(attrs, l.rank()));
  const int64_t g = c.feature_group_count;
  const DimExpr& features = l.shape[c.lhs_spec[1]];
  const DimExpr& in_features = r.shape[c.rhs_spec[1]];
  const DimExpr& out_features = r.shape[c.rhs_spec[0]];
  if (!known_equal(scope, features, in_features * DimExpr(g)))
    return op_error(kConv, "expected lhs ", l.to_string(), " feature dim ", c.lhs_spec[1], " to be rhs ", r.to_string(),
               " input-feature dim ", c.rhs_spec[1], " (", in_features.to_string(), ") times feature_group_count ", g,
               ", found ", features.to_string());
  const bool divides = out_features.constant_value()
                           ? *out_features.constant_value() % g == 0
                           : known_equal(scope, floordiv(out_features, DimExpr(g)) * DimExpr(g), out_features);
  if (!divides)
    return op_error(kConv, "expected rhs ", r.to_string(), " output-feature dim ", c.rhs_spec[0],
               " to be divisible by feature_group_count ", g, ", found ", out_features.to_string());
  Shape out(l.rank());
  out[c.out_spec[0]] = l.shape[c.lhs_spec[0]];
  out[c.out_spec[1]] = out_features;
  for (int i = 0; i < c.spatial_rank(); ++i) {
    const DimExpr& n = l.shape[c.lhs_spec[2 + i]];
    const DimExpr& k = r.shape[c.rhs_spec[2 + i]];
    if (k.constant_value() == 0)
      return op_error(kConv, "expected a non-empty window, found rhs ", r.to_string(), " spatial dim ", c.rhs_spec[2 + i],
                 " of size 0");
    if (c.lhs_dilation[i] > 1 && !n.is_constant()) {
      MCX_ASSIGN_OR_RETURN(bool pos, decided_ge(kConv, scope, n, 1, cat("lhs dilation of spatial dim ", i)));
      if (!pos) return op_error(kConv, "expected lhs spatial dim ", i, " >= 1 under lhs_dilation, found ", n.to_string());
    }
    const DimExpr padded = dilate_dim(n, c.lhs_dilation[i]) + c.padding_low[i] + c.padding_high[i];
    MCX_ASSIGN_OR_RETURN(out[c.out_spec[2 + i]],
                         window_count(kConv, scope, padded, dilate_dim(k, c.rhs_dilation[i]), c.window_strides[i],
                                      cat("spatial dim ", i, " (lhs ", l.to_string(), ", rhs ", r.to_string(), ")")));
  }
  return AbstractValue{l.dtype, out};
}

absl::StatusOr<AbstractValue> reduce_window_type(const AbstractValue& x, const Attrs& attrs,
                                                 const SymbolicScope& scope) {
  MCX_ASSIGN_OR_RETURN(ReduceWindowConfig c, get_reduce_window_config(attrs, x.rank()));
  if (is_bool(x.dtype)) return op_error(kWindow, "expected a numeric operand, found ", x.to_string());
  Shape out(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    for (const DimExpr* p : {&c.padding_low[i], &c.padding_high[i]}) {
      if (p->is_constant()) continue;
      MCX_ASSIGN_OR_RETURN(bool nonneg, decided_ge(kWindow, scope, *p, 0, cat("padding of dim ", i, " >= 0")));
      if (!nonneg) return op_error(kWindow, "expected paddings >= 0, found ", p->to_string(), " at dim ", i);
    }
    const DimExpr padded = x.shape[i] + c.padding_low[i] + c.padding_high[i];
    MCX_ASSIGN_OR_RETURN(out[i], window_count(kWindow, scope, padded, DimExpr(c.window_dimensions[i]),
                                              c.window_strides[i], cat("dim ", i, " of ", x.to_string())));
  }
  return AbstractValue{x.dtype, out};
}

}  // namespace

absl::StatusOr<ConvConfig> get_conv_config(const Attrs& attrs, int rank) {
  ConvConfig c;
  MCX_ASSIGN_OR_RETURN(c.lhs_spec, attr(kConv, attrs.get_ints("lhs_spec")));
  MCX_ASSIGN_OR_RETURN(c.rhs_spec, attr(kConv, attrs.get_ints("rhs_spec")));
  MCX_ASSIGN_OR_RETURN(c.out_spec, attr(kConv, attrs.get_ints("out_spec")));
  MCX_ASSIGN_OR_RETURN(c.window_strides, attr(kConv, attrs.get_ints("window_strides")));
  MCX_ASSIGN_OR_RETURN(c.lhs_dilation, attr(kConv, attrs.get_ints("lhs_dilation")));
  MCX_ASSIGN_OR_RETURN(c.rhs_dilation, attr(kConv, attrs.get_ints("rhs_dilation")));
  MCX_ASSIGN_OR_RETURN(c.padding_low, attr(kConv, attrs.get_dims("padding_low")));
  MCX_ASSIGN_OR_RETURN(c.padding_high, attr(kConv, attrs.get_dims("padding_high")));
  MCX_ASSIGN_OR_RETURN(c.feature_group_count, attr(kConv, attrs.get_int("feature_group_count")));
  MCX_RETURN_IF_ERROR(check_permutation(kConv, "lhs_spec", c.lhs_spec, rank));
  MCX_RETURN_IF_ERROR(check_permutation(kConv, "rhs_spec", c.rhs_spec, rank));
  MCX_RETURN_IF_ERROR(check_permutation(kConv, "out_spec", c.out_spec, rank));
  const int n = rank - 2;
  MCX_RETURN_IF_ERROR(check_count(kConv, "window_strides", c.window_strides.size(), n));
  MCX_RETURN_IF_ERROR(check_count(kConv, "lhs_dilation", c.lhs_dilation.size(), n));
  MCX_RETURN_IF_ERROR(check_count(kConv, "rhs_dilation", c.rhs_dilation.size(), n));
  MCX_RETURN_IF_ERROR(check_count(kConv, "padding_low", c.padding_low.size(), n));
  MCX_RETURN_IF_ERROR(check_count(kConv, "padding_high", c.padding_high.size(), n));
  MCX_RETURN_IF_ERROR(check_positive(kConv, "window_strides", c.window_strides));
  MCX_RETURN_IF_ERROR(check_positive(kConv, "lhs_dilation", c.lhs_dilation));
  MCX_RETURN_IF_ERROR(check_positive(kConv, "rhs_dilation", c.rhs_dilation));
  if (c.feature_group_count < 1)
    return op_error(kConv, "expected feature_group_count >= 1, found ", c.feature_group_count);
  return c;
}

Attrs conv_attrs(const ConvConfig& c) {
  return Attrs{{"lhs_spec", c.lhs_spec},
               {"rhs_spec", c.rhs_spec},
               {"out_spec", c.out_spec},
               {"window_strides", c.window_strides},
               {"lhs_dilation", c.lhs_dilation},
               {"rhs_dilation", c.rhs_dilation},
               {"padding_low", c.padding_low},
               {"padding_high", c.padding_high},
               {"feature_group_count", c.feature_group_count}};
}

absl::StatusOr<ReduceWindowConfig> get_reduce_window_config(const Attrs& attrs, int rank) {
  ReduceWindowConfig c;
  MCX_ASSIGN_OR_RETURN(int64_t reduce, attr(kWindow, attrs.get_int("reduce")));
  MCX_ASSIGN_OR_RETURN(c.window_dimensions, attr(kWindow, attrs.get_ints("window_dimensions")));
  MCX_ASSIGN_OR_RETURN(c.window_strides, attr(kWindow, attrs.get_ints("window_strides")));
  MCX_ASSIGN_OR_RETURN(c.padding_low, attr(kWindow, attrs.get_dims("padding_low")));
  MCX_ASSIGN_OR_RETURN(c.padding_high, attr(kWindow, attrs.get_dims("padding_high")));
  if (reduce < 0 || reduce > 2) return op_error(kWindow, "expected 'reduce' 0 (sum), 1 (max) or 2 (min), found ", reduce);
  c.reduce = static_cast<ReduceOp>(reduce);
  MCX_RETURN_IF_ERROR(check_count(kWindow, "window_dimensions", c.window_dimensions.size(), rank));
  MCX_RETURN_IF_ERROR(check_count(kWindow, "window_strides", c.window_strides.size(), rank));
  MCX_RETURN_IF_ERROR(check_count(kWindow, "padding_low", c.padding_low.size(), rank));
  MCX_RETURN_IF_ERROR(check_count(kWindow, "padding_high", c.padding_high.size(), rank));
  MCX_RETURN_IF_ERROR(check_positive(kWindow, "window_dimensions", c.window_dimensions));
  MCX_RETURN_IF_ERROR(check_positive(kWindow, "window_strides", c.window_strides));
  for (const Shape* s : {&c.padding_low, &c.padding_high})
    for (const DimExpr& p : *s)
      if (auto v = p.constant_value(); v && *v < 0)
        return op_error(kWindow, "expected paddings >= 0, found ", shape_to_string(*s));
  return c;
}

Attrs reduce_window_attrs(const ReduceWindowConfig& c) {
  return Attrs{{"reduce", static_cast<int64_t>(c.reduce)},
               {"window_dimensions", c.window_dimensions},
               {"window_strides", c.window_strides},
               {"padding_low", c.padding_low},
               {"padding_high", c.padding_high}};
}

DimExpr dilate_dim(const DimExpr& n, int64_t d) {
  if (d == 1) return n;
  if (n.constant_value() == 0) return DimExpr(0);
  return (n - DimExpr(1)) * DimExpr(d) + DimExpr(1);
}

absl::StatusOr<AbstractValue> window_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                                const Attrs& attrs, const SymbolicScope& scope) {
  switch (kind) {
    case OpKind::kConvGeneralDilated: return conv_type(operands, attrs, scope);
    case OpKind::kReduceWindow: return reduce_window_type(operands[0], attrs, scope);
    default: break;
  }
  return absl::InternalError(cat("[", op_name(kind), "] not a windowed op"));
}

}  // namespace mcx::ir
