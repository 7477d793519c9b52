// A GPU kernel for reduce_sum, reduce_prod, reduce_max, reduce_min, arg_max or arg_min of one array over some of
// its axes (arg_max/arg_min: one axis, the index of the first extreme, or of the first NaN, as the CPU's),
// accumulating as the CPU does: in the CPU's accumulation type (float for float16/bfloat16, else the dtype;
// bool sums are ORs and products ANDs), from the op's identity (so an empty reduction gives it), with max/min
// keeping a NaN once met, integer arithmetic wrapping. Each thread computes whole output elements, reading
// their reduced elements in row-major order: max, min and integer results equal the CPU's; float sums and
// products may differ from the CPU's fixed 16-lane order in the last bits. No LLVM in this header.
//
// Kernel parameters: the input's device pointer (contiguous, dims), the output's, then the output element count
// n (i64). Errors at generation (kernel_source.h): InvalidArgument for another op kind, or axes out of range,
// unsorted or repeated (or not one, for arg_max/arg_min).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/element_kernel.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"

namespace mcx::cuda::codegen {

struct ReduceKernelSpec {
  ir::OpKind kind;              // reduce_sum, reduce_prod, reduce_max, reduce_min, arg_max or arg_min
  DType dtype;                  // of the input (and of the output, but for arg_max/arg_min)
  std::vector<int64_t> dims;    // the input's
  std::vector<int64_t> axes;    // reduced, sorted and unique (one for arg_max/arg_min)
  DType index_dtype = DType::kInt32;  // arg_max/arg_min's output
  // sum/prod/max/min: the output's dtype when it is not the input's: a partial result kept in the accumulation
  // type (float for float16/bfloat16), or the final result made from such partials. Unset: the input's.
  std::optional<DType> stored_as;
};

}  // namespace mcx::cuda::codegen
