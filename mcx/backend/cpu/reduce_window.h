// reduce_window on the CPU (op.h): sum, max or min over strided windows of an operand padded with the
// reduction's identity. Internal to the CPU backend: the executor passes verified programs.
//
// The last dimension is the inner loop: each output row of the other dimensions combines, per window
// position over those dimensions, one operand row (directly when the last dimension has no window, as in
// channels-last pooling). Output rows run in parallel on the thread pool; every result element is
// combined in window order, so results do not depend on the thread count. Sums of 16-bit floats
// accumulate in float; integer sums wrap.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/view.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cpu {

// The op's attributes (window_rules.h), with the paddings as integers.
struct WindowGeometry {
  ir::ReduceWindowConfig config;
  std::vector<int64_t> padding_low, padding_high;
};

// InvalidArgument for malformed attributes or symbolic paddings (specialise the program first).
absl::StatusOr<WindowGeometry> window_geometry(const ir::Attrs& attrs, int rank);

// The windowed reduction of x into a new Buffer of out_dims (the op's result dims).
Buffer reduce_window(const View& x, const WindowGeometry& geometry, const std::vector<int64_t>& out_dims);

}  // namespace mcx::cpu
