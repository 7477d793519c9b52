// Small helpers shared by the IR transformation tests (autodiff, forward mode, vmap).
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"
#include "tests/support/test_util.h"

namespace mcx::test {

using ir::OpKind;
using ir::Program;
using ir::ValueId;
using V = std::vector<int64_t>;

inline AbstractValue f64(V dims) { return {DType::kFloat64, concrete_shape(dims)}; }
inline AbstractValue i32(V dims) { return {DType::kInt32, concrete_shape(dims)}; }
// f64 values uniform in [lo, hi) from seed.
inline Buffer rnd(V dims, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random_buffer(DType::kFloat64, std::move(dims), seed, lo, hi);
}
inline int count_ops(const Program& p, OpKind k) {
  int n = 0;
  for (const ir::Instr& in : p.instrs) n += in.kind == k;
  return n;
}

}  // namespace mcx::test
