// Creation, elementwise ops, promotion and broadcasting.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"
#include "mcx/trace/trace_state.h"

namespace mcx {

using ir::OpKind;

namespace {

int category(DType t) { return is_bool(t) ? 0 : is_floating(t) ? 2 : 1; }
DType default_of_category(int c) { return c == 0 ? DType::kBool : c == 1 ? DType::kInt32 : DType::kFloat32; }

Array keep_weak(const Array& r, bool weak) { return weak ? with_weak_type(r, true) : r; }

// Converts integer/bool inputs of floating-only ops to f32.
Array to_floating(const Array& x) {
  return is_floating(x.dtype()) ? x : detail::convert_to(x, DType::kFloat32);
}

Array unary_float(OpKind kind, const Array& x) {
  Array xf = to_floating(x);
  return keep_weak(bind(kind, {xf}), x.weak_type());
}

Array unary_any(OpKind kind, const Array& x) { return keep_weak(bind(kind, {x}), x.weak_type()); }

// Promotes and broadcasts x and y; returns the prepared operands and whether the result is weak.
struct Prepared {
  Array x, y;
  bool weak;
};
Prepared prepare(const Array& x, const Array& y, const char* api, std::optional<DType> force = std::nullopt) {
  DType t = force ? *force : result_type(x, y);
  Shape s = broadcast_shapes(x.shape(), y.shape(), api);
  return {detail::broadcast_to_shape(detail::convert_to(x, t), s),
          detail::broadcast_to_shape(detail::convert_to(y, t), s), x.weak_type() && y.weak_type()};
}

Array binary(OpKind kind, const Array& x, const Array& y, const char* api) {
  Prepared p = prepare(x, y, api);
  return keep_weak(bind(kind, {p.x, p.y}), p.weak);
}

Array compare(OpKind kind, const Array& x, const Array& y, const char* api) {
  Prepared p = prepare(x, y, api);
  return bind(kind, {p.x, p.y});
}

}  // namespace

namespace detail {

int64_t normalize_axis(int64_t axis, int rank, const char* api) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw InvalidArgument(absl::StrCat("[", api, "] axis ", axis, " is out of range for rank ", rank));
  }
  return a;
}

Array convert_to(const Array& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  const ArrayImpl& impl = *x.impl();
  if (impl.literal && !impl.is_tracer()) {
    // Re-make the weak scalar in the target dtype from the exact C++ value.
    double v = *impl.literal;
    Buffer b = dispatch_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
        return Buffer::scalar<T>(T(static_cast<float>(v)));
      } else {
        return Buffer::scalar<T>(static_cast<T>(v));
      }
    });
    auto out = std::make_shared<ArrayImpl>();
    out->aval = b.abstract_value();
    out->weak = impl.weak;
    out->literal = v;
    out->value = ArrayValue::single(std::move(b));
    return Array(std::shared_ptr<const ArrayImpl>(std::move(out)));
  }
  return keep_weak(bind(OpKind::kConvert, {x}, ir::Attrs{{"dtype", dtype}}), x.weak_type());
}

Array broadcast_to_shape(const Array& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int r = static_cast<int>(shape.size()), xr = x.ndim();
  std::vector<int64_t> dims;
  for (int i = 0; i < xr; ++i) dims.push_back(r - xr + i);
  return keep_weak(bind(OpKind::kBroadcastInDim, {x}, ir::Attrs{{"shape", shape}, {"broadcast_dimensions", dims}}),
                   x.weak_type());
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdims) {
  Shape out;
  size_t k = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    bool reduced = k < axes.size() && axes[k] == static_cast<int64_t>(i);
    if (reduced) ++k;
    if (!reduced) out.push_back(s[i]);
    else if (keepdims) out.push_back(DimExpr(1));
  }
  return out;
}

Array count_along(const Array& x, const std::vector<int64_t>& axes, DType dtype) {
  DimExpr n(1);
  for (int64_t a : axes) n = n * x.shape()[a];
  if (auto c = n.constant_value()) return convert_to(Array(static_cast<double>(*c)), dtype);
  // Symbolic: count by summing ones over the reduced axes (staged into the trace).
  Shape s;
  for (int64_t a : axes) s.push_back(x.shape()[a]);
  std::vector<int64_t> all;
  for (size_t i = 0; i < s.size(); ++i) all.push_back(static_cast<int64_t>(i));
  return bind(OpKind::kReduceSum, {ones(s, dtype)}, ir::Attrs{{"dimensions", all}});
}

}  // namespace detail

std::vector<int64_t> Axes::resolve(int rank, const char* api) const {
  std::vector<int64_t> out;
  if (all()) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int a : *axes_) out.push_back(detail::normalize_axis(a, rank, api));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw InvalidArgument(absl::StrCat("[", api, "] repeated axis in the axes list"));
  }
  return out;
}

namespace detail {
std::pair<DType, bool> join_types(std::pair<DType, bool> x, std::pair<DType, bool> y) {
  const auto [a, wa] = x;
  const auto [b, wb] = y;
  if (wa == wb) return {promote_types(a, b), wa};
  const DType weak = wa ? a : b, strong = wa ? b : a;
  if (category(weak) <= category(strong)) return {strong, false};
  return {promote_types(strong, default_of_category(category(weak))), false};
}
}  // namespace detail
namespace {
std::pair<DType, bool> type_of(const Array& x) { return {x.dtype(), x.weak_type()}; }
using detail::join_types;
}  // namespace

DType result_type(const Array& x, const Array& y) { return join_types(type_of(x), type_of(y)).first; }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* api) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const bool has_a = i + a.size() >= r, has_b = i + b.size() >= r;
    const DimExpr da = has_a ? a[i + a.size() - r] : DimExpr(1);
    const DimExpr db = has_b ? b[i + b.size() - r] : DimExpr(1);
    // Equal through the trace's scope too: 2*a and 2*b under a == b (as the scope decides, never only ==).
    if (da == db || db == DimExpr(1) || detail::current_scope().known_equal(da, db)) {
      out[i] = da;
    } else if (da == DimExpr(1)) {
      out[i] = db;
    } else {
      throw InvalidArgument(absl::StrCat("[", api, "] shapes ", shape_to_string(a), " and ", shape_to_string(b),
                                         " cannot be broadcast: dimension ", i, " is ", da.to_string(), " vs ",
                                         db.to_string(),
                                         da.is_constant() && db.is_constant()
                                             ? std::string()
                                             : absl::StrCat(" (if they are equal, a constraint '", da.to_string(), " == ",
                                                            db.to_string(), "' in the symbolic scope says so)")));
    }
  }
  return out;
}

// ---- creation -----------------------------------------------------------------------------------------

Array full(const Shape& shape, const Array& value, DType dtype) {
  return with_weak_type(detail::broadcast_to_shape(detail::convert_to(value, dtype), shape), false);
}
Array full(const Shape& shape, const Array& value) {
  DType t = value.weak_type() ? default_of_category(category(value.dtype())) : value.dtype();
  return full(shape, value, t);
}
Array zeros(const Shape& shape, DType dtype) { return full(shape, Array(0), dtype); }
Array ones(const Shape& shape, DType dtype) { return full(shape, Array(1), dtype); }
Array zeros_like(const Array& x) { return full(x.shape(), Array(0), x.dtype()); }
Array ones_like(const Array& x) { return full(x.shape(), Array(1), x.dtype()); }
Array full_like(const Array& x, const Array& value) { return full(x.shape(), value, x.dtype()); }

Array iota(const Shape& shape, int dimension, DType dtype) {
  int64_t d = detail::normalize_axis(dimension, static_cast<int>(shape.size()), "iota");
  return bind(OpKind::kIota, {}, ir::Attrs{{"dtype", dtype}, {"shape", shape}, {"dimension", d}});
}

Array arange(int64_t stop, DType dtype) { return iota({DimExpr(std::max<int64_t>(stop, 0))}, 0, dtype); }

Array arange(double start, double stop, double step, DType dtype) {
  if (step == 0) throw InvalidArgument("[arange] step must not be zero");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((stop - start) / step)));
  Array i = iota({DimExpr(n)}, 0, dtype);
  if (start == 0 && step == 1) return i;
  return with_weak_type(i * step + start, false);
}

Array eye(int64_t n, DType dtype) {
  return astype(equal(iota({n, n}, 0), iota({n, n}, 1)), dtype);
}

// ---- unary --------------------------------------------------------------------------------------------

Array negative(const Array& x) { return unary_any(OpKind::kNeg, x); }
Array abs(const Array& x) { return unary_any(OpKind::kAbs, x); }
Array sign(const Array& x) { return unary_any(OpKind::kSign, x); }
Array exp(const Array& x) { return unary_float(OpKind::kExp, x); }
Array log(const Array& x) { return unary_float(OpKind::kLog, x); }
Array log1p(const Array& x) { return unary_float(OpKind::kLog1p, x); }
Array expm1(const Array& x) { return unary_float(OpKind::kExpm1, x); }
Array tanh(const Array& x) { return unary_float(OpKind::kTanh, x); }
Array sigmoid(const Array& x) { return unary_float(OpKind::kLogistic, x); }
Array sqrt(const Array& x) { return unary_float(OpKind::kSqrt, x); }
Array rsqrt(const Array& x) { return unary_float(OpKind::kRsqrt, x); }
Array floor(const Array& x) { return is_floating(x.dtype()) ? unary_any(OpKind::kFloor, x) : x; }
Array ceil(const Array& x) { return is_floating(x.dtype()) ? unary_any(OpKind::kCeil, x) : x; }
Array round(const Array& x) { return is_floating(x.dtype()) ? unary_any(OpKind::kRound, x) : x; }
Array sin(const Array& x) { return unary_float(OpKind::kSin, x); }
Array cos(const Array& x) { return unary_float(OpKind::kCos, x); }
Array erf(const Array& x) { return unary_float(OpKind::kErf, x); }
Array erfc(const Array& x) { return unary_float(OpKind::kErfc, x); }
Array erf_inv(const Array& x) { return unary_float(OpKind::kErfInv, x); }
Array logical_not(const Array& x) { return unary_any(OpKind::kNot, x); }
Array isfinite(const Array& x) {
  if (!is_floating(x.dtype())) return full(x.shape(), Array(true), DType::kBool);
  return bind(OpKind::kIsFinite, {x});
}
Array square(const Array& x) { return x * x; }
Array reciprocal(const Array& x) { return 1.0 / x; }
Array stop_gradient(const Array& x) { return unary_any(OpKind::kStopGradient, x); }
Array astype(const Array& x, DType dtype) { return with_weak_type(detail::convert_to(x, dtype), false); }

// ---- binary -------------------------------------------------------------------------------------------

Array add(const Array& x, const Array& y) { return binary(OpKind::kAdd, x, y, "add"); }
Array subtract(const Array& x, const Array& y) { return binary(OpKind::kSub, x, y, "subtract"); }
Array multiply(const Array& x, const Array& y) { return binary(OpKind::kMul, x, y, "multiply"); }
Array divide(const Array& x, const Array& y) {
  DType t = result_type(x, y);
  if (!is_floating(t)) {
    Prepared p = prepare(x, y, "divide", DType::kFloat32);
    return keep_weak(bind(OpKind::kDiv, {p.x, p.y}), p.weak);
  }
  return binary(OpKind::kDiv, x, y, "divide");
}
Array remainder(const Array& x, const Array& y) { return binary(OpKind::kRem, x, y, "remainder"); }
Array power(const Array& x, const Array& y) { return binary(OpKind::kPow, x, y, "power"); }
Array maximum(const Array& x, const Array& y) { return binary(OpKind::kMax, x, y, "maximum"); }
Array minimum(const Array& x, const Array& y) { return binary(OpKind::kMin, x, y, "minimum"); }
Array logical_and(const Array& x, const Array& y) { return binary(OpKind::kAnd, x, y, "logical_and"); }
Array logical_or(const Array& x, const Array& y) { return binary(OpKind::kOr, x, y, "logical_or"); }
Array logical_xor(const Array& x, const Array& y) { return binary(OpKind::kXor, x, y, "logical_xor"); }
Array equal(const Array& x, const Array& y) { return compare(OpKind::kEq, x, y, "equal"); }
Array not_equal(const Array& x, const Array& y) { return compare(OpKind::kNe, x, y, "not_equal"); }
Array less(const Array& x, const Array& y) { return compare(OpKind::kLt, x, y, "less"); }
Array less_equal(const Array& x, const Array& y) { return compare(OpKind::kLe, x, y, "less_equal"); }
Array greater(const Array& x, const Array& y) { return compare(OpKind::kGt, x, y, "greater"); }
Array greater_equal(const Array& x, const Array& y) { return compare(OpKind::kGe, x, y, "greater_equal"); }

// ---- ternary ------------------------------------------------------------------------------------------

Array where(const Array& cond, const Array& x, const Array& y) {
  Array c = is_bool(cond.dtype()) ? cond : not_equal(cond, Array(0));
  DType t = result_type(x, y);
  Shape s = broadcast_shapes(broadcast_shapes(c.shape(), x.shape(), "where"), y.shape(), "where");
  Array r = bind(OpKind::kSelect, {detail::broadcast_to_shape(c, s),
                                   detail::broadcast_to_shape(detail::convert_to(x, t), s),
                                   detail::broadcast_to_shape(detail::convert_to(y, t), s)});
  return keep_weak(r, x.weak_type() && y.weak_type());
}

Array clamp(const Array& lo, const Array& x, const Array& hi) {
  DType t = join_types(join_types(type_of(lo), type_of(x)), type_of(hi)).first;
  Shape s = broadcast_shapes(broadcast_shapes(lo.shape(), x.shape(), "clamp"), hi.shape(), "clamp");
  Array r = bind(OpKind::kClamp, {detail::broadcast_to_shape(detail::convert_to(lo, t), s),
                                  detail::broadcast_to_shape(detail::convert_to(x, t), s),
                                  detail::broadcast_to_shape(detail::convert_to(hi, t), s)});
  return keep_weak(r, x.weak_type() && lo.weak_type() && hi.weak_type());
}
Array clip(const Array& x, const Array& lo, const Array& hi) { return clamp(lo, x, hi); }

// ---- operators ----------------------------------------------------------------------------------------

Array operator+(const Array& x, const Array& y) { return add(x, y); }
Array operator-(const Array& x, const Array& y) { return subtract(x, y); }
Array operator*(const Array& x, const Array& y) { return multiply(x, y); }
Array operator/(const Array& x, const Array& y) { return divide(x, y); }
Array operator-(const Array& x) { return negative(x); }
Array operator==(const Array& x, const Array& y) { return equal(x, y); }
Array operator!=(const Array& x, const Array& y) { return not_equal(x, y); }
Array operator<(const Array& x, const Array& y) { return less(x, y); }
Array operator<=(const Array& x, const Array& y) { return less_equal(x, y); }
Array operator>(const Array& x, const Array& y) { return greater(x, y); }
Array operator>=(const Array& x, const Array& y) { return greater_equal(x, y); }

}  // namespace mcx
