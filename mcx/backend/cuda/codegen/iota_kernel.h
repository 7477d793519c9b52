// A GPU kernel for iota: each element of an array of `dims` holds its coordinate along `dimension`, converted
// to `dtype` as convert does (so a float16 iota rounds as the CPU's). Kernel parameters: the output's device
// pointer, then its element count n (i64). Errors at generation (kernel_source.h): InvalidArgument for a
// dimension out of range. No LLVM in this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/element_kernel.h"
#include "mcx/core/dtype.h"

namespace mcx::cuda::codegen {

struct IotaKernelSpec {
  DType dtype;
  std::vector<int64_t> dims;
  int64_t dimension = 0;
};

}  // namespace mcx::cuda::codegen
