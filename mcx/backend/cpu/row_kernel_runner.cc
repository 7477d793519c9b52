#include "mcx/backend/cpu/row_kernel_runner.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>

#include "mcx/backend/cpu/thread_pool.h"

namespace mcx::cpu {
namespace {

std::atomic<int64_t> g_ran{0}, g_misfit{0};

// A read's strides (elements) over the row dims, or nullopt when a row's own elements do not fit: a full
// row's must be contiguous, a row scalar's one element repeated.
std::optional<std::vector<int64_t>> read_row_strides(const View& v, bool full, size_t row_rank) {
  int64_t expect = 1;
  for (int d = v.rank() - 1; d >= static_cast<int>(row_rank); --d) {
    if (v.dims[d] == 1) continue;
    if (v.strides[d] != (full ? expect : 0)) return std::nullopt;
    expect *= v.dims[d];
  }
  return std::vector<int64_t>(v.strides.begin(), v.strides.begin() + row_rank);
}

// Row-dim strides of a dense value with per_row elements in each row.
std::vector<int64_t> dense_row_strides(const std::vector<int64_t>& row_dims, int64_t per_row) {
  std::vector<int64_t> s(row_dims.size());
  int64_t step = per_row;
  for (int d = static_cast<int>(row_dims.size()) - 1; d >= 0; --d) {
    s[d] = step;
    step *= row_dims[d];
  }
  return s;
}

// Whether row dims [first, end) flatten into one stride (size-1 dims aside); that stride into *stride.
bool flattens(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, size_t first, int64_t* stride) {
  std::optional<int64_t> inner;
  int64_t span = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= static_cast<int>(first); --d) {
    if (dims[d] == 1) continue;
    if (!inner) inner = strides[d];
    else if (strides[d] != *inner * span) return false;
    span *= dims[d];
  }
  *stride = inner.value_or(0);
  return true;
}

int64_t product(const std::vector<int64_t>& d, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= d[i];
  return n;
}

}  // namespace

bool run_row_kernel(const RowProgram& rp, RowKernelFn fn, const std::vector<View>& reads,
                    std::vector<Buffer>& outputs) {
  const size_t nv = rp.values.size(), rank = rp.row_dims.size();
  std::vector<std::vector<int64_t>> strides(nv, std::vector<int64_t>(rank, 0));  // scratch rows: all 0
  std::vector<std::byte*> base(nv, nullptr);
  for (size_t k = 0; k < reads.size(); ++k) {
    std::optional<std::vector<int64_t>> s = read_row_strides(reads[k], rp.values[k].full, rank);
    if (!s) {
      g_misfit.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    strides[k] = *std::move(s);
    base[k] = reads[k].data;
  }
  for (size_t j = 0; j < rp.outputs.size(); ++j) {
    const int v = rp.outputs[j];
    base[v] = static_cast<std::byte*>(outputs[j].mutable_data());
    strides[v] = dense_row_strides(rp.row_dims, rp.values[v].full ? rp.cols : 1);
  }
  // Scratch rows: one per full value used only inside, 64-byte aligned, per thread.
  std::vector<int64_t> scratch_offset(nv, -1);
  int64_t scratch_bytes = 0;
  for (size_t v = 0; v < nv; ++v) {
    if (rp.values[v].storage != RowProgram::Storage::kScratch) continue;
    scratch_offset[v] = scratch_bytes;
    scratch_bytes += (rp.cols * dtype_size(rp.values[v].dtype) + 63) / 64 * 64;
  }
  // The longest suffix of the row dims over which every value's rows are one stride apart: the kernel runs
  // it in one call per index of the dims before it (one call in all when every layout is dense).
  std::vector<int64_t> row_stride(nv, 0);
  auto all_flatten = [&](size_t first) {
    for (size_t v = 0; v < nv; ++v) {
      if (!flattens(rp.row_dims, strides[v], first, &row_stride[v])) return false;
    }
    return true;
  };
  size_t first = 0;
  while (!all_flatten(first)) ++first;  // ends by rank - 1: the last row dim alone always flattens
  g_ran.fetch_add(1, std::memory_order_relaxed);
  const int64_t segments = product(rp.row_dims, 0, first), seg_rows = product(rp.row_dims, first, rank);
  if (segments == 0 || seg_rows == 0) return true;
  // At least two calls per thread when there are enough rows; at most ~64 KiB of a row value per call.
  const int64_t total = segments * seg_rows;
  const int64_t per_thread = (total + 2 * num_threads() - 1) / (2 * num_threads());
  const int64_t by_cache = std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(1, rp.cols * 4));
  const int64_t block = std::max<int64_t>(1, std::min({per_thread, by_cache, seg_rows}));
  const int64_t blocks_per_segment = (seg_rows + block - 1) / block;
  parallel_for(segments * blocks_per_segment, 1, [&](int64_t b, int64_t e) {
    thread_local std::vector<std::byte> scratch;
    if (static_cast<int64_t>(scratch.size()) < scratch_bytes + 64) scratch.resize(scratch_bytes + 64);
    std::byte* aligned =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
    std::vector<void*> ptrs(nv, nullptr);
    std::vector<int64_t> index(first);
    for (int64_t item = b; item < e; ++item) {
      int64_t seg = item / blocks_per_segment;
      const int64_t r0 = (item % blocks_per_segment) * block, n = std::min(block, seg_rows - r0);
      for (int d = static_cast<int>(first) - 1; d >= 0; --d) {
        index[d] = seg % rp.row_dims[d];
        seg /= rp.row_dims[d];
      }
      for (size_t v = 0; v < nv; ++v) {
        if (scratch_offset[v] >= 0) {
          ptrs[v] = aligned + scratch_offset[v];
        } else if (base[v] != nullptr) {
          int64_t offset = r0 * row_stride[v];
          for (size_t d = 0; d < first; ++d) offset += index[d] * strides[v][d];
          ptrs[v] = base[v] + offset * dtype_size(rp.values[v].dtype);
        }
      }
      fn(ptrs.data(), row_stride.data(), n, rp.cols);
    }
  });
  return true;
}

RowKernelRuns row_kernel_runs() {
  return {g_ran.load(std::memory_order_relaxed), g_misfit.load(std::memory_order_relaxed)};
}

}  // namespace mcx::cpu
