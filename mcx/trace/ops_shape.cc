// Shape manipulation, indexing and linear algebra.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"
#include "mcx/trace/ops_util.h"

namespace mcx {

using ir::OpKind;

namespace {

Array keep_weak(const Array& r, bool weak) { return weak ? with_weak_type(r, true) : r; }

DType common_dtype(const std::vector<Array>& xs) {
  std::pair<DType, bool> acc{xs.front().dtype(), xs.front().weak_type()};
  for (size_t i = 1; i < xs.size(); ++i) acc = detail::join_types(acc, {xs[i].dtype(), xs[i].weak_type()});
  return acc.first;
}

}  // namespace

Array broadcast_to(const Array& x, const Shape& shape) {
  Shape s = broadcast_shapes(x.shape(), shape, "broadcast_to");
  if (s != shape) {
    throw InvalidArgument(absl::StrCat("[broadcast_to] cannot broadcast ", x.aval().to_string(), " to ",
                                       shape_to_string(shape)));
  }
  return detail::broadcast_to_shape(x, shape);
}

std::vector<Array> broadcast_arrays(const std::vector<Array>& xs) {
  if (xs.empty()) return {};
  Shape s = xs.front().shape();
  for (const Array& x : xs) s = broadcast_shapes(s, x.shape(), "broadcast_arrays");
  std::vector<Array> out;
  for (const Array& x : xs) out.push_back(detail::broadcast_to_shape(x, s));
  return out;
}

Array reshape(const Array& x, const Shape& shape) {
  Shape s = shape;
  int inferred = -1;
  DimExpr known(1);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == DimExpr(-1)) {
      if (inferred >= 0) throw InvalidArgument("[reshape] only one dimension may be -1");
      inferred = static_cast<int>(i);
    } else {
      known = known * s[i];
    }
  }
  const DimExpr total = num_elements(x.shape());
  const SymbolicScope scope = detail::current_scope();
  if (inferred >= 0) {
    // known divides total as the scope decides: b*c / 2 under mod(b, 2) == 0 is (b // 2)*c.
    const bool divisible = known.constant_value() != 0 && scope.known_equal(floordiv(total, known) * known, total);
    if (!divisible) {
      throw InvalidArgument(absl::StrCat("[reshape] cannot infer the -1 dimension reshaping ", x.aval().to_string(),
                                         " to ", shape_to_string(shape), ": ", total.to_string(),
                                         " elements are not known to be a multiple of ", known.to_string(),
                                         total.is_constant() ? "" : " (a constraint such as 'mod(..., k) == 0' may say so)"));
    }
    s[inferred] = floordiv(total, known);
  }
  if (s == x.shape()) return x;
  if (num_elements(s) != total && !scope.known_equal(num_elements(s), total)) {
    throw InvalidArgument(absl::StrCat("[reshape] cannot reshape ", x.aval().to_string(), " (",
                                       total.to_string(), " elements) to ", shape_to_string(s)));
  }
  return keep_weak(bind(OpKind::kReshape, {x}, ir::Attrs{{"shape", s}}), x.weak_type());
}

Array flatten(const Array& x) { return reshape(x, {num_elements(x.shape())}); }

Array transpose(const Array& x, std::vector<int64_t> permutation) {
  const int r = x.ndim();
  if (permutation.empty()) {
    for (int i = r - 1; i >= 0; --i) permutation.push_back(i);
  }
  if (static_cast<int>(permutation.size()) != r) {
    throw InvalidArgument(absl::StrCat("[transpose] permutation [", absl::StrJoin(permutation, ","),
                                       "] does not match rank ", r, " of ", x.aval().to_string()));
  }
  bool identity = true;
  for (int i = 0; i < r; ++i) {
    permutation[i] = detail::normalize_axis(permutation[i], r, "transpose");
    identity = identity && permutation[i] == i;
  }
  if (identity) return x;
  return keep_weak(bind(OpKind::kTranspose, {x}, ir::Attrs{{"permutation", permutation}}), x.weak_type());
}

Array swapaxes(const Array& x, int axis1, int axis2) {
  std::vector<int64_t> perm(x.ndim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[detail::normalize_axis(axis1, x.ndim(), "swapaxes")],
            perm[detail::normalize_axis(axis2, x.ndim(), "swapaxes")]);
  return transpose(x, perm);
}

Array expand_dims(const Array& x, int axis) {
  int64_t a = detail::normalize_axis(axis, x.ndim() + 1, "expand_dims");
  Shape s = x.shape();
  s.insert(s.begin() + a, DimExpr(1));
  return reshape(x, s);
}

Array squeeze(const Array& x, Axes axes) {
  Shape s;
  if (axes.all()) {
    for (const DimExpr& d : x.shape()) {
      if (d != DimExpr(1)) s.push_back(d);
    }
  } else {
    std::vector<int64_t> ax = axes.resolve(x.ndim(), "squeeze");
    for (int64_t a : ax) {
      if (x.shape()[a] != DimExpr(1)) {
        throw InvalidArgument(absl::StrCat("[squeeze] cannot squeeze axis ", a, " of ", x.aval().to_string(),
                                           ": its size is ", x.shape()[a].to_string(), ", not 1"));
      }
    }
    s = detail::reduced_shape(x.shape(), ax, false);
  }
  return reshape(x, s);
}

Array slice(const Array& x, const Shape& start, const Shape& limit, std::vector<int64_t> strides) {
  if (strides.empty()) strides.assign(start.size(), 1);
  return keep_weak(bind(OpKind::kSlice, {x}, ir::Attrs{{"start", start}, {"limit", limit}, {"strides", strides}}),
                   x.weak_type());
}

namespace {
std::vector<Array> index_operands(const std::vector<Array>& starts, const char* api) {
  std::vector<Array> out;
  for (const Array& s : starts) {
    if (s.ndim() != 0) {
      throw InvalidArgument(absl::StrCat("[", api, "] start indices must be scalars; found ", s.aval().to_string()));
    }
    out.push_back(is_integer(s.dtype()) && !s.weak_type() ? s : astype(s, DType::kInt32));
  }
  return out;
}
}  // namespace

Array dynamic_slice(const Array& x, const std::vector<Array>& starts, const Shape& sizes) {
  std::vector<Array> ops{x};
  for (Array& s : index_operands(starts, "dynamic_slice")) ops.push_back(std::move(s));
  return bind(OpKind::kDynamicSlice, std::move(ops), ir::Attrs{{"sizes", sizes}});
}

Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts) {
  std::vector<Array> ops{x, astype(update, x.dtype())};
  for (Array& s : index_operands(starts, "dynamic_update_slice")) ops.push_back(std::move(s));
  return bind(OpKind::kDynamicUpdateSlice, std::move(ops));
}

Array concatenate(const std::vector<Array>& xs, int axis) {
  if (xs.empty()) throw InvalidArgument("[concatenate] needs at least one array");
  if (xs.size() == 1) return xs[0];
  DType t = common_dtype(xs);
  std::vector<Array> ops;
  for (const Array& x : xs) ops.push_back(detail::convert_to(x, t));
  int64_t a = detail::normalize_axis(axis, xs[0].ndim(), "concatenate");
  return bind(OpKind::kConcatenate, std::move(ops), ir::Attrs{{"dimension", a}});
}

Array stack(const std::vector<Array>& xs, int axis) {
  if (xs.empty()) throw InvalidArgument("[stack] needs at least one array");
  int64_t a = detail::normalize_axis(axis, xs[0].ndim() + 1, "stack");
  std::vector<Array> expanded;
  for (const Array& x : xs) expanded.push_back(expand_dims(x, static_cast<int>(a)));
  if (expanded.size() == 1) return expanded[0];
  return concatenate(expanded, static_cast<int>(a));
}

Array pad(const Array& x, const Shape& low, const Shape& high, const Array& value, std::vector<int64_t> interior) {
  if (interior.empty()) interior.assign(low.size(), 0);
  Array v = detail::convert_to(value, x.dtype());
  if (v.ndim() != 0) throw InvalidArgument("[pad] the padding value must be a scalar; found " + v.aval().to_string());
  return bind(OpKind::kPad, {x, with_weak_type(v, false)},
              ir::Attrs{{"low", low}, {"high", high}, {"interior", interior}});
}

Array reverse(const Array& x, Axes axes) {
  std::vector<int64_t> ax = axes.resolve(x.ndim(), "reverse");
  if (ax.empty()) return x;
  return keep_weak(bind(OpKind::kReverse, {x}, ir::Attrs{{"dimensions", ax}}), x.weak_type());
}

// ---- linear algebra -----------------------------------------------------------------------------------

Array dot_general(const Array& lhs, const Array& rhs, const DotDims& dims) {
  DType t = result_type(lhs, rhs);
  return bind(OpKind::kDotGeneral, {detail::convert_to(lhs, t), detail::convert_to(rhs, t)},
              ir::Attrs{{"lhs_batch", dims.lhs_batch},
                        {"rhs_batch", dims.rhs_batch},
                        {"lhs_contracting", dims.lhs_contracting},
                        {"rhs_contracting", dims.rhs_contracting}});
}

Array matmul(const Array& a, const Array& b) {
  if (a.ndim() == 0 || b.ndim() == 0) {
    throw InvalidArgument(absl::StrCat("[matmul] operands must have rank >= 1; found ", a.aval().to_string(),
                                       " and ", b.aval().to_string()));
  }
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  Array x = a_vec ? expand_dims(a, 0) : a;
  Array y = b_vec ? expand_dims(b, 1) : b;
  const int xr = x.ndim(), yr = y.ndim();
  const DimExpr& k1 = x.shape()[xr - 1];
  const DimExpr& k2 = y.shape()[yr - 2];
  if (k1 != k2) {
    throw InvalidArgument(absl::StrCat("[matmul] contracting dimensions differ: lhs ", a.aval().to_string(), " dim ",
                                       a.ndim() - 1, " is ", k1.to_string(), ", rhs ", b.aval().to_string(), " dim ",
                                       b_vec ? 0 : b.ndim() - 2, " is ", k2.to_string()));
  }
  Array out;
  if (yr == 2) {
    // [..., m, k] x [k, n]: no batch dims needed; result [..., m, n].
    out = dot_general(x, y, {{}, {}, {xr - 1}, {0}});
  } else {
    Shape bx(x.shape().begin(), x.shape().end() - 2), by(y.shape().begin(), y.shape().end() - 2);
    Shape batch = broadcast_shapes(bx, by, "matmul");
    Shape sx = batch, sy = batch;
    sx.insert(sx.end(), x.shape().end() - 2, x.shape().end());
    sy.insert(sy.end(), y.shape().end() - 2, y.shape().end());
    x = detail::broadcast_to_shape(x, sx);
    y = detail::broadcast_to_shape(y, sy);
    const int64_t nb = static_cast<int64_t>(batch.size());
    std::vector<int64_t> bd(nb);
    std::iota(bd.begin(), bd.end(), 0);
    out = dot_general(x, y, {bd, bd, {nb + 1}, {nb}});
  }
  if (a_vec || b_vec) {
    Shape s = out.shape();
    if (b_vec) s.erase(s.end() - 1);          // the added n = 1
    if (a_vec) s.erase(s.end() - (b_vec ? 1 : 2));  // the added m = 1
    out = reshape(out, s);
  }
  return out;
}

// ---- indexing -----------------------------------------------------------------------------------------

Array take(const Array& x, const Array& indices, int axis) {
  if (x.ndim() == 0) throw InvalidArgument("[take] cannot index a scalar " + x.aval().to_string());
  const int r = x.ndim();
  const int64_t a = detail::normalize_axis(axis, r, "take");
  Array idx = is_integer(indices.dtype()) && !indices.weak_type() ? indices : astype(indices, DType::kInt32);
  if (a == 0) return bind(OpKind::kTake, {x, idx});
  std::vector<int64_t> perm{a};
  for (int i = 0; i < r; ++i) {
    if (i != a) perm.push_back(i);
  }
  Array g = bind(OpKind::kTake, {transpose(x, perm), idx});  // [k..., x[:a], x[a+1:]]
  const int64_t k = idx.ndim();
  std::vector<int64_t> back;
  for (int64_t i = 0; i < a; ++i) back.push_back(k + i);
  for (int64_t i = 0; i < k; ++i) back.push_back(i);
  for (int64_t i = k + a; i < g.ndim(); ++i) back.push_back(i);
  return transpose(g, back);
}

Array scatter_add(const Array& x, const Array& indices, const Array& updates) {
  Array idx = is_integer(indices.dtype()) && !indices.weak_type() ? indices : astype(indices, DType::kInt32);
  return bind(OpKind::kScatterAdd, {x, idx, detail::convert_to(updates, x.dtype())});
}

Array take_along_last(const Array& x, const Array& labels) {
  const int64_t c = x.dim(-1);
  return sum(x * one_hot(labels, c, x.dtype()), -1);
}

}  // namespace mcx
