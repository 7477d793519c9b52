// CPU kernels for the non-element-wise ops. Internal to the CPU backend: the executor (executable.cc)
// checks attributes and shapes (the program is verified), so kernels assume valid inputs. Inputs are
// strided views; outputs are new contiguous Buffers. Large kernels run on the thread pool; every result
// is independent of the thread count (work is split at shape-determined boundaries).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mcx/backend/cpu/view.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/op.h"

namespace mcx::cpu {

// reduce_sum/max/min/prod over `dims` (sorted, unique). Sums of 16-bit floats accumulate in float.
Buffer reduce(ir::OpKind kind, const View& x, const std::vector<int64_t>& dims);
// argmax/argmin along dim: first index of the extreme value; NaN counts as the extreme.
Buffer arg_reduce(ir::OpKind kind, const View& x, int64_t dim, DType index_dtype);
// Inclusive prefix sum along dim (from the end when reverse).
Buffer cumsum(const View& x, int64_t dim, bool reverse);
// Positions (i32) that sort x along dim, stably; NaN sorts above every number (sort.cc).
Buffer argsort(const View& x, int64_t dim, bool descending);

// dot_general (op.h): float types through cblas (16-bit floats via float), integers by a naive loop.
Buffer dot_general(const View& lhs, const View& rhs, const std::vector<int64_t>& lhs_batch,
                   const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contracting,
                   const std::vector<int64_t>& rhs_contracting);

Buffer iota(DType dtype, const std::vector<int64_t>& dims, int64_t dimension);
Buffer concatenate(std::span<const View> xs, int64_t dimension);
// pad with a scalar value; low/high may be negative (cropping), interior >= 0.
Buffer pad(const View& x, const View& value, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
           const std::vector<int64_t>& interior);
// Start indices are read from the int scalars and clamped into [0, dim - size] as in XLA.
Buffer dynamic_slice(const View& x, std::span<const View> starts, const std::vector<int64_t>& sizes);
Buffer dynamic_update_slice(const View& x, const View& update, std::span<const View> starts);
// Rows of x along axis 0 at clamped indices; result dims = indices.dims ++ x.dims[1:].
Buffer take(const View& x, const View& indices);
// x with each updates row added at its (clamped) index; duplicates accumulate in index order.
Buffer scatter_add(const View& x, const View& indices, const View& updates);
// Threefry-2x32, 20 rounds (Random123 / JAX): each row (c0, c1) of counts encrypted under key.
Buffer threefry2x32(const View& key, const View& counts);
// Reads an integer scalar view as int64.
int64_t read_index(const View& v);

}  // namespace mcx::cpu
