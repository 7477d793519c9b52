// GPU kernels for the windowed ops, one thread per result element:
//   - reduce_window (sum, max or min) over a window of each element, padding elements being the op's identity,
//     combined in the CPU's order (window positions row-major) and type (float for float16/bfloat16; max/min
//     keep a NaN; integer sums wrap): the CPU's results bit for bit.
//   - conv_general_dilated: the direct sum over the window and the group's input features of lhs (read at
//     strides, padding and both dilations) times rhs, in the accumulation type (float for float16/bfloat16),
//     rounded once. The CPU sums by GEMMs in another order: the results agree within the rounding of the sum.
//     Gradients are convolutions too (the autodiff rules emit them), so this kernel runs them.
// Operands are contiguous in their own dims, read through the ops' dimension numbers. No LLVM in this header.
//
// Kernel parameters: reduce_window: x, out, n; conv: lhs, rhs, out, n (device pointers; n = result elements).
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/core/dtype.h"
#include "mcx/core/reduce_op.h"

namespace mcx::cuda::codegen {

struct ReduceWindowKernelSpec {
  ReduceOp reduce = ReduceOp::kSum;  // sum, max or min
  DType dtype;
  std::vector<int64_t> in, out;      // x's and the result's dims
  std::vector<int64_t> window, strides, padding_low;
};

struct ConvKernelSpec {
  DType dtype;
  std::vector<int64_t> lhs, rhs, out;            // dims
  std::vector<int64_t> lhs_spec, rhs_spec, out_spec;  // ir::ConvConfig's dimension numbers
  std::vector<int64_t> strides, lhs_dilation, rhs_dilation, padding_low;
  int64_t feature_groups = 1;
};

}  // namespace mcx::cuda::codegen
