// Cumulative products, maxima and minima: inclusive scans of an associative binary op, by doubling
// (Hillis-Steele). Step k combines every element with the one 2^k before it, so after ceil(log2 n) steps
// element i combines elements 0..i: O(n log n) work in log n array ops, each differentiable and batchable
// through the ops it is made of (JAX lowers these scans to reduce_window or an associative scan too).
#include "mcx/trace/ops.h"
#include "mcx/trace/ops_util.h"

namespace mcx {
namespace {

Array inclusive_scan(const Array& x, int axis, bool reverse_order, Array (*combine)(const Array&, const Array&),
                     const char* api) {
  const int64_t a = detail::normalize_axis(axis, x.ndim(), api);
  const std::optional<int64_t> length = x.shape()[static_cast<size_t>(a)].constant_value();
  if (!length) {
    throw InvalidArgument(std::string("[") + api + "] needs a static length along the scanned axis; found " +
                          x.aval().to_string());
  }
  const int n = static_cast<int>(a);
  Array y = reverse_order ? reverse(x, {n}) : x;
  auto part = [&](const Array& v, int64_t begin, int64_t end) {
    Shape start(static_cast<size_t>(v.ndim()), DimExpr(0)), limit = v.shape();
    start[static_cast<size_t>(a)] = DimExpr(begin);
    limit[static_cast<size_t>(a)] = DimExpr(end);
    return slice(v, start, limit);
  };
  for (int64_t step = 1; step < *length; step *= 2) {
    // y[i] = combine(y[i - step], y[i]) for i >= step; the first `step` elements are complete already.
    Array tail = combine(part(y, 0, *length - step), part(y, step, *length));
    y = concatenate({part(y, 0, step), tail}, n);
  }
  return reverse_order ? reverse(y, {n}) : y;
}

}  // namespace

Array cumprod(const Array& x, int axis, bool reverse) { return inclusive_scan(x, axis, reverse, &multiply, "cumprod"); }
Array cummax(const Array& x, int axis, bool reverse) { return inclusive_scan(x, axis, reverse, &maximum, "cummax"); }
Array cummin(const Array& x, int axis, bool reverse) { return inclusive_scan(x, axis, reverse, &minimum, "cummin"); }

}  // namespace mcx
