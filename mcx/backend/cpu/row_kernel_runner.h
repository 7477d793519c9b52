// Runs a row region through its generated row kernel (row_program.h, codegen/row_kernel.h): lays out each
// value's rows for the kernel's calling convention and spreads the rows over the thread pool.
// Thread-safety: reentrant (per-thread scratch).
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/backend/cpu/row_program.h"
#include "mcx/backend/cpu/view.h"
#include "mcx/core/buffer.h"

namespace mcx::cpu {

// Runs every row of rp with fn. reads[k] is the view of input value k (dims starting with rp.row_dims);
// outputs[j] the contiguous buffer of rp.outputs[j], written whole. Returns false, having written nothing,
// when a read's layout does not fit the kernel: a full row's elements must be contiguous (a row scalar's one
// element repeated) and the row dims must flatten into one stride, except that the outer row dims may jump
// (a mask broadcast over batch and heads is run as one kernel call per (batch, head)).
bool run_row_kernel(const RowProgram& rp, RowKernelFn fn, const std::vector<View>& reads,
                    std::vector<Buffer>& outputs);

// Process-wide counts of run_row_kernel's outcomes (tests, diagnostics).
struct RowKernelRuns {
  int64_t ran = 0;         // regions run by their kernel
  int64_t layout_misfit = 0;  // returned false: a read's layout did not fit
};
RowKernelRuns row_kernel_runs();

}  // namespace mcx::cpu
