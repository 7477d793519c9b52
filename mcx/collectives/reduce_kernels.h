// The element-wise reductions every Communicator uses, so that all of them compute the same bits for the
// same inputs in the same order: floats in their own precision (16-bit floats in f32, rounded per step),
// integers wrapping, bool as or/and, max/min propagating NaN.
//
// Order is part of the contract: reduce_into computes, per element, ((in[0] op in[1]) op in[2]) ..., and
// accumulate computes acc = acc op x, accumulate_left acc = x op acc. A single-process group (LocalGroup) and the deterministic
// cross-process mode (spanning_group.h) both reduce in group rank order with reduce_into, which is why
// their results are bitwise identical.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/collectives/communicator.h"
#include "mcx/core/dtype.h"

namespace mcx {

// out[k] = in[0][offset + k] op in[1][offset + k] op ... for k in [0, n), elements of `dtype`; `offset` and
// `n` count elements. out may not alias any input.
void reduce_into(DType dtype, const std::vector<const char*>& ins, int64_t offset, int64_t n, ReduceOp op,
                 char* out);

// acc[k] = acc[k] op x[k] for k in [0, n). acc and x do not overlap.
void accumulate(DType dtype, ReduceOp op, char* acc, const char* x, int64_t n);

// acc[k] = x[k] op acc[k] for k in [0, n): x is the left operand (it comes first in the order of ranks). acc and x
// do not overlap.
void accumulate_left(DType dtype, ReduceOp op, char* acc, const char* x, int64_t n);

}  // namespace mcx
