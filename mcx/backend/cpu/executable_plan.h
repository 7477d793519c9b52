// The plan a CpuExecutable runs (executable.h), private to the CPU backend: plan_program builds it in named
// phases (below, in the order they run), executable.cc walks it (execute), executable_codec.cc writes and reads
// it (serialised executables, docs/compilation_cache.md).
//
// Every step holds what it needs by name: an op step's attributes are parsed once into the typed struct of
// its op (StepAttrs), never re-read from the IR while executing.
// Thread-safety: a Plan is immutable once built; execute() reads it from any number of threads. The phases
// are single-threaded over the plan they are given (generate_kernels compiles on the thread pool inside).
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
#include "mcx/kernelgen/element_groups.h"

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
  // The kinds of step, in the order of execute's dispatch table (executable.cc) and of the serialised form.
  enum class StepKind { kView, kOp, kFused, kRowRegion, kControlFlow };
  static constexpr int kNumStepKinds = 5;
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

// ---- The planner. plan_program runs the phases below in this order; each reads what the earlier ones put in
// the plan and adds its own part (tests/backend/executable_plan_test.cc tests each one).

// All phases: the plan of `program`, which CpuExecutable::compile wraps. Errors: those of the phases.
absl::StatusOr<std::unique_ptr<CpuExecutable::Plan>> plan_program(const ir::Program& program);

// Phase 1. The program the plan runs: `program` verified, with its custom-rule calls (ir/custom_rules.h)
// inlined so that they fuse with their neighbours. Errors: ir::verify's InvalidArgument; InvalidArgument for a
// program holding a shard_map (it runs only partitioned over its mesh, which the message names).
absl::StatusOr<ir::Program> program_for_plan(const ir::Program& program);

// Phase 2. The parts of a plan that follow from its program alone: dims per value and the constants (also run
// when a stored plan is loaded). InvalidArgument when a value has a symbolic type.
absl::Status fill_program_facts(CpuExecutable::Plan& plan);

// Phase 3. Element-wise fusion groups (fusion.h), as every platform forms them (kernelgen/element_groups.h).
// Unimplemented for an element-wise op with no CPU kernel for its dtypes (naming the instruction).
using FusionGroups = kernelgen::ElementGroups;
absl::StatusOr<FusionGroups> form_fusion_groups(const CpuExecutable::Plan& plan);

// Phase 4. plan.steps in program order (constants skipped) and plan.groups: each group one kFused step where
// its last member is (leaves in first-use order, escaping members as outputs), view ops kView, control-flow
// siblings one kControlFlow step (compiled here), every other op kOp with its parsed attributes. Errors:
// parse_step_attrs's and ControlFlowRunner::compile's.
absl::Status schedule_steps(CpuExecutable::Plan& plan, const FusionGroups& fusion);

// Phase 5. Replaces maximal runs of row-blockable steps (see Plan::RowRegion) holding at least one reduction
// and one fused group by one kRowRegion step (views of outside values met in a run move before it), then
// fills each region's reads, escaping values, post-region views and block size (executable_row_regions.cc).
void form_row_regions(CpuExecutable::Plan& plan);

// Phase 6. Liveness: each value's storage root (itself, or for a view its operand's root), the last step that
// reads each root, and the roots results pin. Adds every value whose storage dies to its last step's release
// list (results and what they view never die; group values that do not escape have no storage).
struct Liveness {
  std::vector<ir::ValueId> root;
  std::vector<int> last_use;  // per root: index into plan.steps of its last reader, or -1
  std::vector<bool> pinned;   // per root: a result or what a result views
};
Liveness plan_releases(CpuExecutable::Plan& plan, const FusionGroups& fusion);

// Phase 7. In-place reuse: a group output takes over the storage of a leaf that dies in that step, was made by
// this execution (not an argument, constant, collective or control-flow result), is no view, has the output's
// dtype and dims, and is the only leaf over that storage (GroupPlan::inplace_leaf).
void plan_inplace_reuse(CpuExecutable::Plan& plan, const Liveness& live);

// Phase 8. plan.has_collectives: a collective op in the program or in a control-flow region.
void note_collectives(CpuExecutable::Plan& plan);

// Phase 9. Machine code (codegen/), on the thread pool: a kernel per row region that is a row program, then per
// fused group outside those regions of at least codegen::kMinNodesToGenerate nodes. A source the generator
// does not take, or whose compile fails (logged once per process), stays on the interpreter. No-op when code
// generation is off (executable_kernels.cc).
void generate_kernels(CpuExecutable::Plan& plan);

// The values a top-level step reads (a fused group's leaves, a region's reads, else its instruction's operands).
std::vector<ir::ValueId> step_reads(const CpuExecutable::Plan& plan, const CpuExecutable::Plan::Step& st);

}  // namespace mcx::cpu
