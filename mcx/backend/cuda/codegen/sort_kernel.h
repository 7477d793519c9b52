// A GPU kernel for one pass of a bitonic sorting network over argsort's lines: argsort (op.h) of x along one
// dimension is x's lines (outer k1 x inner k2 of them, each `length` long) sorted stably, ascending or
// descending, NaN above every number and -0 equal to +0, as the CPU's. Each line's positions are padded to
// `padded` (a power of two >= length; padding sorts last) in a permutation array perm[line][padded] (int32,
// holding 0, 1, ... before the first pass: an iota), and the passes (k = 2, 4, ..., padded; j = k/2, ..., 1)
// compare-and-swap perm[i] and perm[i + j] by their keys, ties broken by position: every pair of (key,
// position) is distinct, so the network's result is the one stable order, the CPU's exactly. A pass's pairs are
// disjoint, so its threads never touch the same element. No LLVM in this header.
//
// Kernel parameters: x's device pointer (contiguous), perm's, then j and k (i64) and the pair count n (i64:
// lines * padded / 2). Errors at generation (kernel_source.h): InvalidArgument when padded is not a power of two
// at least length.
#pragma once

#include <cstdint>

#include "mcx/core/dtype.h"

namespace mcx::cuda::codegen {

struct SortPassKernelSpec {
  DType dtype;           // x's
  int64_t outer = 1;     // k1: the product of x's dims before the sorted one
  int64_t length = 0;    // the sorted dim
  int64_t inner = 1;     // k2: the product of x's dims after it
  int64_t padded = 1;    // a power of two >= length
  bool descending = false;
};

// The least power of two >= n (1 for n <= 1).
int64_t bitonic_padded_length(int64_t n);

}  // namespace mcx::cuda::codegen
