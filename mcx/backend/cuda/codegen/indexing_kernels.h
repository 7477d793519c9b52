// GPU kernels that move elements to or from positions computed at run time, each as the CPU computes it:
//   - take: rows of x (along axis 0) at indices clamped into [0, rows - 1]; result dims indices.dims ++
//     x.dims[1:]; zeros when x has no rows.
//   - scatter_add: x's rows plus update rows at clamped indices, in place over a copy of x: one thread per
//     column runs the indices in order, so duplicates add in the CPU's order (float16/bfloat16 in float, each
//     sum rounded; integers wrap): the CPU's results bit for bit, without atomics.
//   - a dynamic window: dynamic_slice reads the window of x at start indices clamped into [0, dim - size]
//     (XLA's rule); dynamic_update_slice writes the update there, in place over a copy of x.
//   - pad: each result element is x's element that lands there (low edge, interior spacing; negative edges
//     crop) or the padding value.
// Indices and start indices may be of any integer dtype. No LLVM in this header.
//
// Kernel parameters (device pointers, then the element count n, i64):
//   take: x, indices, out; n = result elements.
//   scatter_add: updates, indices, out (holding x); n = elements per row.
//   dynamic window, reading: x, each start index (a scalar), out; n = window elements.
//   dynamic window, writing: update, each start index, out (holding x); n = window elements.
//   pad: x, the padding value (a scalar), out; n = result elements.
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/core/dtype.h"

namespace mcx::cuda::codegen {

struct TakeKernelSpec {
  DType dtype;
  DType index_dtype;
  int64_t rows = 0;      // x.dims[0]
  int64_t row_size = 1;  // elements per row (the product of x.dims[1:])
};

struct ScatterAddKernelSpec {
  DType dtype;
  DType index_dtype;
  int64_t rows = 0;      // x.dims[0]
  int64_t row_size = 1;
  int64_t indices = 0;   // how many update rows
};

struct DynamicWindowKernelSpec {
  DType dtype;
  std::vector<int64_t> array;   // x's dims
  std::vector<int64_t> window;  // the slice's (or update's) dims
  std::vector<DType> start_dtypes;  // one per dim
  bool write = false;           // dynamic_update_slice
};

struct PadKernelSpec {
  DType dtype;
  std::vector<int64_t> in;   // x's dims
  std::vector<int64_t> out;  // the result's
  std::vector<int64_t> low;  // may be negative
  std::vector<int64_t> interior;
};

}  // namespace mcx::cuda::codegen
