// The naive double-precision reference of the windowed ops of opset 3 (op.h): conv_general_dilated and
// reduce_window, one loop per output element with explicit index arithmetic. Used by reference_eval.cc;
// shares no code with the backend.
//
// Values are row-major doubles with their dims. reduce_window's padding holds the reduction's identity
// (0, -inf, +inf) and max/min propagate NaN; integer operands are evaluated in double (exact for the
// small values tests use; the caller converts the result to the op's dtype, saturating).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/attrs.h"

namespace mcx::test {

struct RefArray {
  std::vector<int64_t> dims;
  std::vector<double> values;
};

// The convolution of lhs and rhs with the op's attributes into a result of out_dims (the instruction's
// type); InvalidArgument for attributes the op rejects or operands that do not fit them.
absl::StatusOr<RefArray> reference_conv(const ir::Attrs& attrs, const RefArray& lhs, const RefArray& rhs,
                                        const std::vector<int64_t>& out_dims);
absl::StatusOr<RefArray> reference_reduce_window(const ir::Attrs& attrs, const RefArray& x,
                                                 const std::vector<int64_t>& out_dims);

}  // namespace mcx::test
