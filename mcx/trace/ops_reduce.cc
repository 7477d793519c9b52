// Reductions, scans and neural-network helpers.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"

namespace mcx {

using ir::OpKind;

namespace {

Array reduce(OpKind kind, const Array& x, const Axes& axes, bool keepdims, const char* api) {
  std::vector<int64_t> ax = axes.resolve(x.ndim(), api);
  if (ax.empty()) return x;
  Array r = bind(kind, {x}, ir::Attrs{{"dimensions", ax}});
  return keepdims ? reshape(r, detail::reduced_shape(x.shape(), ax, true)) : r;
}

// Sums and products of bool inputs count in i32, as jax.numpy does.
Array accumulable(const Array& x) { return is_bool(x.dtype()) ? astype(x, DType::kInt32) : x; }

Array arg_reduce(OpKind kind, const Array& x, int axis, bool keepdims, const char* api) {
  int64_t a = detail::normalize_axis(axis, x.ndim(), api);
  Array r = bind(kind, {x}, ir::Attrs{{"dimension", a}, {"index_dtype", DType::kInt32}});
  return keepdims ? expand_dims(r, static_cast<int>(a)) : r;
}

// The max along axes (kept), with non-finite values replaced by 0 and gradients stopped: the shift that
// makes exp() safe in logsumexp/softmax without changing the result.
Array stable_shift(const Array& x, const std::vector<int64_t>& ax) {
  Array m = stop_gradient(bind(OpKind::kReduceMax, {x}, ir::Attrs{{"dimensions", ax}}));
  m = reshape(m, detail::reduced_shape(x.shape(), ax, true));
  return where(isfinite(m), m, zeros_like(m));
}

Array floating(const Array& x) { return is_floating(x.dtype()) ? x : astype(x, DType::kFloat32); }

}  // namespace

Array sum(const Array& x, Axes axes, bool keepdims) {
  return reduce(OpKind::kReduceSum, accumulable(x), axes, keepdims, "sum");
}
Array max(const Array& x, Axes axes, bool keepdims) { return reduce(OpKind::kReduceMax, x, axes, keepdims, "max"); }
Array min(const Array& x, Axes axes, bool keepdims) { return reduce(OpKind::kReduceMin, x, axes, keepdims, "min"); }
Array prod(const Array& x, Axes axes, bool keepdims) {
  return reduce(OpKind::kReduceProd, accumulable(x), axes, keepdims, "prod");
}

Array mean(const Array& x, Axes axes, bool keepdims) {
  Array xf = floating(x);
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "mean");
  return sum(xf, ax.empty() ? Axes(std::vector<int>{}) : axes, keepdims) / detail::count_along(xf, ax, xf.dtype());
}

Array var(const Array& x, Axes axes, bool keepdims, int ddof) {
  Array xf = floating(x);
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "var");
  Array centered = xf - mean(xf, axes, true);
  Array n = detail::count_along(xf, ax, xf.dtype());
  return sum(centered * centered, axes, keepdims) / (n - static_cast<double>(ddof));
}

Array argmax(const Array& x, int axis, bool keepdims) { return arg_reduce(OpKind::kArgMax, x, axis, keepdims, "argmax"); }
Array argmin(const Array& x, int axis, bool keepdims) { return arg_reduce(OpKind::kArgMin, x, axis, keepdims, "argmin"); }

Array cumsum(const Array& x, int axis, bool reverse) {
  Array xa = accumulable(x);
  int64_t a = detail::normalize_axis(axis, x.ndim(), "cumsum");
  return bind(OpKind::kCumsum, {xa}, ir::Attrs{{"dimension", a}, {"reverse", int64_t{reverse ? 1 : 0}}});
}

Array logsumexp(const Array& x, Axes axes, bool keepdims) {
  Array xf = floating(x);
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "logsumexp");
  if (ax.empty()) return xf;
  Array m = stable_shift(xf, ax);
  Array r = log(sum(exp(xf - m), axes, true)) + m;
  return keepdims ? r : reshape(r, detail::reduced_shape(x.shape(), ax, false));
}

Array softmax(const Array& x, Axes axes) {
  Array xf = floating(x);
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "softmax");
  if (ax.empty()) return ones_like(xf);
  Array e = exp(xf - stable_shift(xf, ax));
  return e / sum(e, axes, true);
}

Array log_softmax(const Array& x, Axes axes) {
  Array xf = floating(x);
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "log_softmax");
  if (ax.empty()) return zeros_like(xf);
  Array shifted = xf - stable_shift(xf, ax);
  return shifted - log(sum(exp(shifted), axes, true));
}

Array relu(const Array& x) { return where(x > 0, x, zeros_like(x)); }

Array gelu(const Array& x, bool approximate) {
  Array xf = floating(x);
  if (approximate) {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * xf * (1.0 + tanh(c * (xf + 0.044715 * xf * xf * xf)));
  }
  return 0.5 * xf * (1.0 + erf(xf * (1.0 / std::sqrt(2.0))));  // as jax.nn.gelu(approximate=False)
}

Array one_hot(const Array& indices, int64_t num_classes, DType dtype) {
  if (!is_integer(indices.dtype())) {
    throw InvalidArgument("[one_hot] indices must be integers; found " + indices.aval().to_string());
  }
  Shape s = indices.shape();
  s.push_back(DimExpr(num_classes));
  Array classes = iota(s, static_cast<int>(s.size()) - 1, indices.dtype());
  return astype(equal(expand_dims(indices, -1), classes), dtype);
}

}  // namespace mcx
