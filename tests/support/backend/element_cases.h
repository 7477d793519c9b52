// The element-wise cases every code generator is checked on: each element-wise op (and convert, is_finite) with
// every dtype combination the CPU interpreter and its code generator take, and inputs full of each dtype's
// special values. The CPU generator's tests compare them with the interpreter bit for bit; the GPU generator's
// assemble a kernel for each and compare it with the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"

namespace mcx::test {

struct ElementCase {
  ir::OpKind kind;
  DType result;
  DType operand;
  std::vector<DType> leaves;  // one per operand
};

// Every case, in op then dtype order.
std::vector<ElementCase> all_element_cases();

// "add f32(f32)".
std::string element_case_name(const ElementCase& c);

// n values of dtype t: the type's special values first (NaN, infinities, signed zeros, subnormals, integer
// extremes), then pseudo-random ones from `seed`, shuffled so that special values meet in binary ops.
Buffer interesting_values(DType t, int64_t n, uint64_t seed);

}  // namespace mcx::test
