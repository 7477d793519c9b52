// The plan a CpuExecutable runs (executable.h), private to the CPU backend: executable.cc builds it
// (compile: fusion groups, schedule, row regions, liveness, in-place reuse) and walks it (execute);
// executable_codec.cc writes and reads it (serialised executables, docs/compilation_cache.md).
//
// Every step holds what it needs by name: an op step's attributes are parsed once into the typed struct of
// its op (StepAttrs), never re-read from the IR while executing.
// Thread-safety: a Plan is immutable once built; execute() reads it from any number of threads.
#pragma once

#include <map>
#include <memory>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/control_flow.h"
#include "mcx/backend/cpu/conv.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/fusion.h"
#include "mcx/backend/cpu/reduce_window.h"
#include "mcx/backend/cpu/row_program.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

// The parsed attributes of one op step, one struct per op family (names as in op.h).
namespace step_attrs {
struct Iota {
  DType dtype = DType::kFloat32;
  int64_t dimension = 0;
};
struct BroadcastInDim {
  std::vector<int64_t> broadcast_dimensions;  // operand dim i -> result dim broadcast_dimensions[i]
};
struct Transpose {
  std::vector<int64_t> permutation;
};
struct Slice {
  std::vector<int64_t> start, limit, strides;
};
struct Axes {  // reverse and the reductions
  std::vector<int64_t> dimensions;
};
struct DynamicSlice {
  std::vector<int64_t> sizes;
};
struct Concatenate {
  int64_t dimension = 0;
};
struct Pad {
  std::vector<int64_t> low, high, interior;
};
struct ArgReduce {  // arg_max, arg_min
  int64_t dimension = 0;
  DType index_dtype = DType::kInt32;
};
struct DotGeneral {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contracting, rhs_contracting;
};
struct Cumsum {
  int64_t dimension = 0;
  bool reverse = false;
};
struct Argsort {
  int64_t dimension = 0;
  bool descending = false;
};
}  // namespace step_attrs

// std::monostate: an op whose kernel needs no attributes (take, scatter_add, ...).
using StepAttrs = std::variant<std::monostate, step_attrs::Iota, step_attrs::BroadcastInDim, step_attrs::Transpose,
                               step_attrs::Slice, step_attrs::Axes, step_attrs::DynamicSlice,
                               step_attrs::Concatenate, step_attrs::Pad, step_attrs::ArgReduce,
                               step_attrs::DotGeneral, step_attrs::Cumsum, step_attrs::Argsort, ConvGeometry,
                               WindowGeometry>;

// The attributes of instruction `in` as its step needs them. Errors: a missing or mistyped attribute,
// symbolic dims (named by the attribute getters).
absl::StatusOr<StepAttrs> parse_step_attrs(const ir::Instr& in);

struct CpuExecutable::Plan {
  struct GroupPlan {
    FusedGroup group;
    std::vector<ir::ValueId> leaves;
    std::vector<ir::ValueId> outputs;  // values written out, parallel to group.outputs
    std::vector<int> inplace_leaf;     // per output: leaf index whose storage is reused, or -1
  };
  enum class StepKind { kView, kOp, kFused, kRowRegion, kControlFlow };
  struct Step {
    StepKind kind = StepKind::kOp;
    ir::ValueId value = -1;  // kView / kOp / kControlFlow (the first sibling)
    int group = -1;          // kFused
    int region = -1;         // kRowRegion
    StepAttrs attrs;         // kView / kOp
    // kControlFlow: the runner of a group of sibling instructions and the value of each result, -1 where
    // no sibling yields it.
    std::shared_ptr<const ControlFlowRunner> control_flow;
    std::vector<ir::ValueId> sibling_values;
    std::vector<ir::ValueId> release;  // values dropped after this step
  };

  ir::Program program;
  std::vector<std::vector<int64_t>> dims;  // concrete dims per value
  std::map<ir::ValueId, Buffer> constants;
  // A run of steps over values whose dim 0 is the same "row" axis of size rows: fused groups with that
  // leading dim, reductions that keep dim 0, broadcasts of such values that map dim 0 to dim 0, and reshapes
  // that keep dim 0. It runs row block by row block (a block fits in L2), so e.g. softmax reads its input once
  // from memory; values used only inside live in per-block storage. Results equal running the steps one by one.
  struct RowRegion {
    int64_t rows = 0;
    int64_t max_block_rows = 1;              // cache-sized blocks (plan time); execute may pick smaller ones
    std::vector<Step> steps;                 // kView (internal broadcasts), kOp (reductions), kFused
    std::map<ir::ValueId, int> local;        // value made inside -> slot in the per-block table
    std::map<ir::ValueId, int> escape_slot;  // non-view value needed after the region -> full buffer index
    std::vector<ir::ValueId> escaping;       // parallel to the full buffers
    std::vector<Step> post_views;            // internal views needed after the region, applied at full size
    std::vector<ir::ValueId> reads;          // values from outside the region
    int64_t local_row_bytes = 0;             // per row: bytes of the values that live only inside a block
    // The region as straight-line code over one row, when every value is a row scalar or a full row
    // (plan_row_program), and its generated kernel (codegen/row_kernel.h), or null: the steps run one by
    // one on each block.
    std::shared_ptr<const RowProgram> row_program;
    std::shared_ptr<const codegen::GeneratedKernel> row_kernel;
  };

  std::vector<GroupPlan> groups;
  std::vector<RowRegion> regions;
  std::vector<Step> steps;
  bool has_collectives = false;
};

// rg as a RowProgram (row_program.h), or Unimplemented naming why it is not one: a value with neither one
// nor `cols` elements per row, a reduction over only some of a row's axes or of a dtype other than a float,
// a broadcast that is not of a row scalar, or no rows. (Whether the generator takes each stage's group is
// codegen::row_unsupported_reason's question.)
absl::StatusOr<RowProgram> plan_row_program(const CpuExecutable::Plan& plan, const CpuExecutable::Plan::RowRegion& rg);

// The parts of a plan that follow from its program alone (no planning): dims per value and the constants.
// InvalidArgument when a value has a symbolic type.
absl::Status fill_program_facts(CpuExecutable::Plan& plan);

}  // namespace mcx::cpu
