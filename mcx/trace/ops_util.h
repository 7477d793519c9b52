// Internal helpers shared by the ops library sources (not part of the public API).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/trace/array.h"

namespace mcx::detail {

// Joins (dtype, weak) pairs with JAX's promotion rules for weak types.
std::pair<DType, bool> join_types(std::pair<DType, bool> x, std::pair<DType, bool> y);
// Normalises a possibly negative axis; InvalidArgument "[api] axis 3 is out of range for rank 2".
int64_t normalize_axis(int64_t axis, int rank, const char* api);
// x converted to dtype (no-op when equal); weak literal scalars are re-made exactly without an op.
Array convert_to(const Array& x, DType dtype);
// x broadcast (broadcast_in_dim, trailing alignment) to shape, which must be a valid broadcast target.
Array broadcast_to_shape(const Array& x, const Shape& shape);
// Shape with the given (sorted) axes set to 1 (keepdims) or removed.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdims);
// The number of elements along axes as an array of dtype (works for symbolic dims inside traces).
Array count_along(const Array& x, const std::vector<int64_t>& axes, DType dtype);

}  // namespace mcx::detail
