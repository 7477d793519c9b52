// A row region (executable_plan.h, Plan::RowRegion) as straight-line code over one row: the input of the
// row-kernel generator (codegen/row_kernel.h), which emits the whole region as one function that runs it row
// by row, every intermediate of a row in registers or in one row of scratch (L1-sized for rows up to a few
// thousand elements).
//
// Every value of such a region has either one element per row (a row scalar: softmax's max and sum) or
// `cols` elements per row in row-major order (a full row: softmax's input, exponentials and output). The
// region's views are not stages: a broadcast of a row scalar, or a reshape that keeps rows, names the same
// row value as its operand.
//
// Plain data; no LLVM types. Thread-safety: immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mcx/backend/cpu/fusion.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"

namespace mcx::cpu {

struct RowProgram {
  enum class Storage : uint8_t {
    kInput,     // made outside the region: a pointer and a row stride (in elements) per call
    kOutput,    // needed after the region: written to its full buffer (contiguous rows)
    kScratch,   // a full row used only inside: one row of per-thread scratch, reused by every row
    kRegister,  // a row scalar used only inside: never in memory
  };
  struct Value {
    DType dtype = DType::kFloat32;
    bool full = false;  // cols elements per row, else one
    Storage storage = Storage::kRegister;
  };
  struct Stage {
    enum class Kind : uint8_t { kElementwise, kReduce };
    Kind kind = Kind::kElementwise;
    // kElementwise: the group's nodes (leaf_dtypes, nodes and outputs; dims and kernel unused). Over the
    // row's cols elements when full (a row-scalar leaf is the same for every element), else once per row.
    FusedGroup group;
    bool full = false;
    ir::OpKind reduce_kind = ir::OpKind::kReduceSum;  // kReduce: sum, prod, max or min of a full row
    std::vector<int> args;     // value indices: the group's leaves, or the reduction's operand
    std::vector<int> results;  // value indices made: one per group output, or the reduction's result
  };

  std::vector<Value> values;  // the region's reads first (parallel to RowRegion::reads), then stage results
  std::vector<Stage> stages;
  std::vector<int> outputs;  // value index of each escaping value, parallel to RowRegion::escaping
  // The rows are the region's leading dims up to the first reduced axis, flattened: softmax of [B, H, T, T]
  // over the last axis has row_dims [B, H, T] and cols T. Neither is part of the kernel's signature.
  std::vector<int64_t> row_dims;
  int64_t cols = 0;  // elements of a full row
};

// The calling convention of a row kernel: runs rows [0, rows) of the region. values[v] points at row 0 of
// value v's storage (its dtype in memory, as FusedKernelFn's leaves) and row_strides[v] is its distance in
// elements from one row to the next: an input's as the caller found it (0 for a broadcast over rows), an
// output's cols or 1 (contiguous), a scratch row's 0 (the same row serves every row). kRegister values have
// neither. A full row's elements are contiguous.
using RowKernelFn = void (*)(void* const* values, const int64_t* row_strides, int64_t rows, int64_t cols);

}  // namespace mcx::cpu
