#include "mcx/runtime/box_copy.h"

#include <cassert>
#include <cstring>
#include <vector>

namespace mcx {

void copy_box(const void* src, std::span<const int64_t> src_origin, std::span<const int64_t> src_dims,
              void* dst, std::span<const int64_t> dst_origin, std::span<const int64_t> dst_dims,
              const IndexBox& region, size_t element_size) {
  const int rank = static_cast<int>(region.start.size());
  assert(static_cast<int>(src_origin.size()) == rank && static_cast<int>(src_dims.size()) == rank);
  assert(static_cast<int>(dst_origin.size()) == rank && static_cast<int>(dst_dims.size()) == rank);
  std::vector<int64_t> extent(rank);
  for (int d = 0; d < rank; ++d) {
    extent[d] = region.limit[d] - region.start[d];
    if (extent[d] <= 0) return;  // empty region
    assert(region.start[d] >= src_origin[d] && region.limit[d] <= src_origin[d] + src_dims[d]);
    assert(region.start[d] >= dst_origin[d] && region.limit[d] <= dst_origin[d] + dst_dims[d]);
  }
  // Merge trailing dimensions held whole by the region in both buffers into one contiguous run.
  // `inner` is the first dimension of the run: dims [inner, rank) are copied by one memcpy.
  int inner = rank;
  int64_t run = 1;  // elements per memcpy
  while (inner > 0) {
    const int d = inner - 1;
    run *= extent[d];
    inner = d;
    if (extent[d] != src_dims[d] || extent[d] != dst_dims[d]) break;  // d is partial: the run ends here
  }
  // Strides in elements of both buffers.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    src_stride[d] = src_stride[d + 1] * src_dims[d + 1];
    dst_stride[d] = dst_stride[d + 1] * dst_dims[d + 1];
  }
  int64_t src_off = 0, dst_off = 0;
  for (int d = 0; d < rank; ++d) {
    src_off += (region.start[d] - src_origin[d]) * src_stride[d];
    dst_off += (region.start[d] - dst_origin[d]) * dst_stride[d];
  }
  const auto* s = static_cast<const std::byte*>(src);
  auto* t = static_cast<std::byte*>(dst);
  const size_t run_bytes = static_cast<size_t>(run) * element_size;
  // Odometer over the outer dimensions [0, inner).
  std::vector<int64_t> idx(inner, 0);
  while (true) {
    std::memcpy(t + dst_off * element_size, s + src_off * element_size, run_bytes);
    int d = inner - 1;
    for (; d >= 0; --d) {
      ++idx[d];
      src_off += src_stride[d];
      dst_off += dst_stride[d];
      if (idx[d] < extent[d]) break;
      src_off -= extent[d] * src_stride[d];
      dst_off -= extent[d] * dst_stride[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

void copy_box(const Buffer& src, const IndexBox& src_box, Buffer& dst, const IndexBox& dst_box,
              const IndexBox& region) {
  assert(src.dtype() == dst.dtype());
  copy_box(src.data(), src_box.start, src.dims(), dst.mutable_data(), dst_box.start, dst.dims(), region,
           dtype_size(src.dtype()));
}

Buffer extract_box(const Buffer& src, const IndexBox& src_box, const IndexBox& box) {
  Buffer out = Buffer::uninitialized(src.dtype(), box.shape());
  copy_box(src, src_box, out, box, box);
  return out;
}

}  // namespace mcx
