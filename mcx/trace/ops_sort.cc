// Sorting: argsort (an IR op), and sort, take_along_axis and top_k built on it and on take.
#include <string>

#include "mcx/core/error.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"

namespace mcx {

using ir::OpKind;

Array argsort(const Array& x, int axis, bool descending) {
  if (x.ndim() == 0) throw InvalidArgument("[argsort] expected an array of rank >= 1, found a scalar " + x.aval().to_string());
  if (x.dtype() == DType::kBool) {
    throw InvalidArgument("[argsort] expected a numeric array, found " + x.aval().to_string() +
                          " (convert booleans to an integer dtype first)");
  }
  const int64_t a = detail::normalize_axis(axis, x.ndim(), "argsort");
  return bind(OpKind::kArgsort, {x}, ir::Attrs{{"dimension", a}, {"descending", int64_t{descending ? 1 : 0}}});
}

Array take_along_axis(const Array& x, const Array& indices, int axis) {
  if (!is_integer(indices.dtype())) {
    throw InvalidArgument("[take_along_axis] expected integer indices, found " + indices.aval().to_string());
  }
  if (indices.ndim() != x.ndim() || x.ndim() == 0) {
    throw InvalidArgument("[take_along_axis] expected indices of the array's rank " + std::to_string(x.ndim()) +
                          " (>= 1), found " + indices.aval().to_string() + " for " + x.aval().to_string());
  }
  const int64_t a = detail::normalize_axis(axis, x.ndim(), "take_along_axis");
  for (int d = 0; d < x.ndim(); ++d) {
    if (d != a && !(x.shape()[d] == indices.shape()[d])) {
      throw InvalidArgument("[take_along_axis] expected indices shaped like the array outside axis " +
                            std::to_string(a) + ", found " + indices.aval().to_string() + " for " +
                            x.aval().to_string() + " (dimension " + std::to_string(d) + " differs)");
    }
  }
  // Lines along `axis` become rows of a matrix [lines, n] (the axis swapped last, which a second swap undoes);
  // a pick is then one take from the flattened matrix at line * n + index.
  const Array xt = swapaxes(x, static_cast<int>(a), -1), it = swapaxes(indices, static_cast<int>(a), -1);
  const Shape& xs = xt.shape();
  const DimExpr m = it.shape().back();
  DimExpr lines(1);
  for (size_t d = 0; d + 1 < xs.size(); ++d) lines = lines * xs[d];
  const Array flat = reshape(xt, Shape{lines * xs.back()});
  const Array rows = reshape(astype(it, DType::kInt32), Shape{lines, m});
  // Clamped per line (take would clamp into the whole matrix, reaching into the next line).
  const Array n = detail::count_along(xt, {static_cast<int64_t>(xs.size()) - 1}, DType::kInt32);
  const Array offsets = iota(Shape{lines, m}, 0, DType::kInt32) * n;
  Shape picked_shape(xs.begin(), xs.end() - 1);
  picked_shape.push_back(m);
  return swapaxes(reshape(take(flat, offsets + clip(rows, zeros_like(n), n - 1)), picked_shape), static_cast<int>(a), -1);
}

Array sort(const Array& x, int axis, bool descending) {
  return take_along_axis(x, argsort(x, axis, descending), axis);
}

std::vector<Array> sort(const std::vector<Array>& operands, int axis, int num_keys, bool descending) {
  if (operands.empty()) throw InvalidArgument("[sort] expected at least one operand, found none");
  if (num_keys < 1 || num_keys > static_cast<int>(operands.size())) {
    throw InvalidArgument("[sort] expected num_keys in [1, " + std::to_string(operands.size()) + "] (the number of "
                          "operands), found " + std::to_string(num_keys));
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].valid()) throw InvalidArgument("[sort] operand " + std::to_string(i) + " is an empty Array");
    if (!(operands[i].shape() == operands[0].shape())) {
      throw InvalidArgument("[sort] every operand must have operand 0's shape " + operands[0].aval().to_string() +
                            "; operand " + std::to_string(i) + " is " + operands[i].aval().to_string());
    }
  }
  // Lexicographic and stable: stable sorts by the least significant key first, then by each more
  // significant key in the order found so far.
  Array order = argsort(operands[num_keys - 1], axis, descending);
  for (int k = num_keys - 2; k >= 0; --k) {
    order = take_along_axis(order, argsort(take_along_axis(operands[k], order, axis), axis, descending), axis);
  }
  std::vector<Array> sorted;
  sorted.reserve(operands.size());
  for (const Array& x : operands) sorted.push_back(take_along_axis(x, order, axis));
  return sorted;
}

std::pair<Array, Array> top_k(const Array& x, int64_t k) {
  if (x.ndim() == 0) throw InvalidArgument("[top_k] expected an array of rank >= 1, found a scalar " + x.aval().to_string());
  const DimExpr n = x.shape().back();
  if (k < 0 || (n.is_constant() && k > *n.constant_value())) {
    throw InvalidArgument("[top_k] expected 0 <= k <= " + n.to_string() + " (the last dimension of " +
                          x.aval().to_string() + "), found k = " + std::to_string(k));
  }
  Shape start(x.ndim(), DimExpr(0)), limit = x.shape();
  limit.back() = DimExpr(k);
  const Array order = slice(argsort(x, -1, /*descending=*/true), start, limit);
  return {take_along_axis(x, order, -1), order};
}

}  // namespace mcx
