// Strided copies of N-d index boxes between row-major buffers: the data movement of resharding and of
// assembling a whole value from its shards.
//
// Each buffer holds the elements of one box of global indices (its `origin` is the box's start, its dims
// the box's shape). copy_box copies the elements of `region` (global indices, inside both buffers' boxes)
// from src to dst. Trailing dimensions that both buffers hold whole are merged into one contiguous run, so
// the copy is a sequence of memcpy calls of the longest possible length (one call when the region is
// contiguous in both). Works for any element size.
//
// Thread-safety: none needed beyond the caller's: concurrent copies into disjoint regions of one dst
// are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mcx/core/buffer.h"
#include "mcx/spmd/partition_spec.h"

namespace mcx {

// Raw form: rank = region.start.size() = src_origin.size() = src_dims.size() = ... (asserted).
void copy_box(const void* src, std::span<const int64_t> src_origin, std::span<const int64_t> src_dims,
              void* dst, std::span<const int64_t> dst_origin, std::span<const int64_t> dst_dims,
              const IndexBox& region, size_t element_size);

// Buffer form: src holds src_box, dst holds dst_box (same dtype, dims equal to the boxes' shapes).
void copy_box(const Buffer& src, const IndexBox& src_box, Buffer& dst, const IndexBox& dst_box,
              const IndexBox& region);

// The elements of `box` (global indices, inside src_box) as a new buffer.
Buffer extract_box(const Buffer& src, const IndexBox& src_box, const IndexBox& box);

}  // namespace mcx
