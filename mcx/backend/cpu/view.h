// Strided views over host memory and the copy kernel behind transpose, broadcast, slice, reverse, pad,
// concatenate and dynamic_update_slice. Internal to the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/dims.h"  // product(dims)
#include "mcx/core/dtype.h"

namespace mcx::cpu {

// Element (not byte) strides; a stride may be 0 (broadcast) or negative (reverse). data points at the
// element with index (0, ..., 0).
struct View {
  std::byte* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;

  int rank() const { return static_cast<int>(dims.size()); }
  int64_t num_elements() const;
  bool is_contiguous() const;  // row-major dense (size-1 dims ignored)
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);
// The row-major multi-index of every linear index of dims, flattened: dims.size() entries per index.
std::vector<int64_t> multi_indices(const std::vector<int64_t>& dims);

// A contiguous view of all of b.
View view_of(const Buffer& b);

// dst[i] = src[i] for every index; dims must match, element sizes must match (dtype is not converted).
// dst must not overlap src unless they are the same view. Runs on the thread pool for large copies.
void copy_view(const View& src, const View& dst);

// A new contiguous buffer with the elements of v.
Buffer materialize(const View& v);

// x as lines along `dim` for the scan and sort kernels: outer x length x inner elements (length = dims[dim]),
// line (o, i) starting at o * length * inner + i with stride inner, in `data`: x itself when contiguous, else a
// contiguous copy owned by `holder`.
struct Lines {
  int64_t outer = 1, length = 1, inner = 1;
  View data;
  Buffer holder;
};
Lines lines_along(const View& x, int64_t dim);

// Calls fn(offset_a, offset_b) for each index of dims in row-major order over [begin, end) (linear
// indices), with offsets computed from two stride vectors. Used by kernels that walk two views at once.
template <typename F>
void for_each_index2(const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                     const std::vector<int64_t>& sb, int64_t begin, int64_t end, F&& fn) {
  const int r = static_cast<int>(dims.size());
  if (begin >= end) return;
  std::vector<int64_t> idx(r);
  int64_t oa = 0, ob = 0;
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = dims[d] == 0 ? 0 : rem % dims[d];
    rem = dims[d] == 0 ? 0 : rem / dims[d];
    oa += idx[d] * sa[d];
    ob += idx[d] * sb[d];
  }
  for (int64_t i = begin; i < end; ++i) {
    fn(oa, ob);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) {
        oa += sa[d];
        ob += sb[d];
        break;
      }
      oa -= (dims[d] - 1) * sa[d];
      ob -= (dims[d] - 1) * sb[d];
      idx[d] = 0;
    }
  }
}

}  // namespace mcx::cpu
