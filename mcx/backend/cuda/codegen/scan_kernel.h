// A GPU kernel for cumsum (op.h) of x along one dimension: each thread runs whole lines (outer k1 x inner k2
// of them, each `length` long), accumulating in the CPU's accumulation type (float for float16/bfloat16; bool
// sums are ORs; integers wrap) in the CPU's order (first to last, or last to first when reversed), each prefix
// rounded to the dtype: the CPU's results bit for bit. No LLVM in this header.
//
// Kernel parameters: x's device pointer (contiguous), the output's, then the line count n (i64).
#pragma once

#include <cstdint>

#include "mcx/core/dtype.h"

namespace mcx::cuda::codegen {

struct CumsumKernelSpec {
  DType dtype;
  int64_t outer = 1;   // k1
  int64_t length = 0;  // the summed dim
  int64_t inner = 1;   // k2
  bool reverse = false;
};

}  // namespace mcx::cuda::codegen
