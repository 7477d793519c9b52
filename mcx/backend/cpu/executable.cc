// CpuExecutable: compile = plan_program (executable_plan.h: verify, fusion groups, schedule, row regions,
// liveness, in-place reuse, generated kernels); execute = walk the plan with per-call state only (so concurrent
// execute calls are safe), each step run by the runner of its kind (kStepRunners).
//
// Values at run time are strided views over shared storage. broadcast_in_dim, transpose, slice, reverse
// and reshape (of a contiguous value) are views: no data moves. Element-wise ops are grouped into fused
// regions (fusion.h) that read those views directly, tile by tile. Every other op is one kernel call
// (kernels.h) that materialises what it needs.
#include "mcx/backend/cpu/executable.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/row_kernel.h"
#include "mcx/backend/cpu/control_flow.h"
#include "mcx/backend/cpu/conv.h"
#include "mcx/backend/cpu/debug_print.h"
#include "mcx/backend/cpu/executable_plan.h"
#include "mcx/backend/cpu/fusion.h"
#include "mcx/backend/cpu/kernels.h"
#include "mcx/backend/cpu/reduce_window.h"
#include "mcx/backend/cpu/row_kernel_runner.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/backend/cpu/view.h"
#include "mcx/core/error.h"
#include "mcx/platform/host_spmd_ops.h"

namespace mcx::cpu {

using ir::OpKind;
using ir::ValueId;

namespace {

using Plan = CpuExecutable::Plan;

struct RtValue {
  Buffer base;  // keeps the storage alive
  View view;
};

// The view op applied to an operand view (no data moves, except reshape of a non-contiguous value).
RtValue apply_view(const Plan::Step& st, const ir::Instr& in, const std::vector<int64_t>& out_dims,
                   const RtValue& x) {
  RtValue r;
  r.base = x.base;
  r.view = x.view;
  View& v = r.view;
  const int esize = dtype_size(v.dtype);
  switch (in.kind) {
    case OpKind::kBroadcastInDim: {
      const auto& to = std::get<step_attrs::BroadcastInDim>(st.attrs).broadcast_dimensions;
      std::vector<int64_t> strides(out_dims.size(), 0);
      for (size_t i = 0; i < to.size(); ++i) {
        if (x.view.dims[i] == out_dims[to[i]]) strides[to[i]] = x.view.strides[i];
      }
      v.dims = out_dims;
      v.strides = std::move(strides);
      break;
    }
    case OpKind::kTranspose: {
      const auto& perm = std::get<step_attrs::Transpose>(st.attrs).permutation;
      for (size_t i = 0; i < perm.size(); ++i) {
        v.dims[i] = x.view.dims[perm[i]];
        v.strides[i] = x.view.strides[perm[i]];
      }
      break;
    }
    case OpKind::kSlice: {
      const auto& slice = std::get<step_attrs::Slice>(st.attrs);
      if (product(out_dims) > 0) {
        for (size_t i = 0; i < out_dims.size(); ++i) v.data += slice.start[i] * x.view.strides[i] * esize;
      }
      for (size_t i = 0; i < out_dims.size(); ++i) v.strides[i] = x.view.strides[i] * slice.strides[i];
      v.dims = out_dims;
      break;
    }
    case OpKind::kReverse:
      for (int64_t d : std::get<step_attrs::Axes>(st.attrs).dimensions) {
        if (v.dims[d] > 0) v.data += (v.dims[d] - 1) * v.strides[d] * esize;
        v.strides[d] = -v.strides[d];
      }
      break;
    case OpKind::kRematBarrier: break;  // the identity: the same view
    default: {  // reshape and sharding_constraint
      if (!x.view.is_contiguous()) {
        r.base = materialize(x.view);
        v = view_of(r.base);
      }
      v.dims = out_dims;
      v.strides = contiguous_strides(out_dims);
      break;
    }
  }
  return r;
}

// The value as a Buffer of its own dims: its storage when the view covers it whole, else a copy.
Buffer to_buffer(const RtValue& x) {
  const bool whole = x.view.is_contiguous() && x.base.valid() && x.view.data == x.base.data() &&
                     x.view.num_elements() == x.base.num_elements();
  return whole ? x.base.reshaped(x.view.dims) : materialize(x.view);
}

RtValue from_buffer(Buffer b) {
  RtValue r;
  r.view = view_of(b);
  r.base = std::move(b);
  return r;
}

Buffer execute_op(const Plan::Step& st, const ir::Instr& in, const std::vector<int64_t>& out_dims,
                  const std::vector<RtValue>& rt) {
  auto opv = [&](int i) -> const View& { return rt[in.operands[i]].view; };
  std::vector<View> rest;
  switch (in.kind) {
    case OpKind::kIota: {
      const auto& a = std::get<step_attrs::Iota>(st.attrs);
      return iota(a.dtype, out_dims, a.dimension);
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: return reduce(in.kind, opv(0), std::get<step_attrs::Axes>(st.attrs).dimensions);
    case OpKind::kArgMax:
    case OpKind::kArgMin: {
      const auto& a = std::get<step_attrs::ArgReduce>(st.attrs);
      return arg_reduce(in.kind, opv(0), a.dimension, a.index_dtype);
    }
    case OpKind::kDotGeneral: {
      const auto& a = std::get<step_attrs::DotGeneral>(st.attrs);
      return dot_general(opv(0), opv(1), a.lhs_batch, a.rhs_batch, a.lhs_contracting, a.rhs_contracting);
    }
    case OpKind::kCumsum: {
      const auto& a = std::get<step_attrs::Cumsum>(st.attrs);
      return cumsum(opv(0), a.dimension, a.reverse);
    }
    case OpKind::kArgsort: {
      const auto& a = std::get<step_attrs::Argsort>(st.attrs);
      return argsort(opv(0), a.dimension, a.descending);
    }
    case OpKind::kConcatenate:
      for (size_t i = 0; i < in.operands.size(); ++i) rest.push_back(opv(static_cast<int>(i)));
      return concatenate(rest, std::get<step_attrs::Concatenate>(st.attrs).dimension);
    case OpKind::kPad: {
      const auto& a = std::get<step_attrs::Pad>(st.attrs);
      return pad(opv(0), opv(1), a.low, a.high, a.interior);
    }
    case OpKind::kDynamicSlice:
      for (size_t i = 1; i < in.operands.size(); ++i) rest.push_back(opv(static_cast<int>(i)));
      return dynamic_slice(opv(0), rest, std::get<step_attrs::DynamicSlice>(st.attrs).sizes);
    case OpKind::kDynamicUpdateSlice:
      for (size_t i = 2; i < in.operands.size(); ++i) rest.push_back(opv(static_cast<int>(i)));
      return dynamic_update_slice(opv(0), opv(1), rest);
    case OpKind::kTake: return take(opv(0), opv(1));
    case OpKind::kScatterAdd: return scatter_add(opv(0), opv(1), opv(2));
    case OpKind::kThreefry2x32: return threefry2x32(opv(0), opv(1));
    case OpKind::kConvGeneralDilated:
      return conv_general_dilated(opv(0), opv(1), std::get<ConvGeometry>(st.attrs), out_dims);
    case OpKind::kReduceWindow: return reduce_window(opv(0), std::get<WindowGeometry>(st.attrs), out_dims);
    default:
      throw std::logic_error(absl::StrCat("[cpu] no kernel for op ", std::string(ir::op_name(in.kind))));
  }
}


// v restricted to rows [r0, r0 + n) of dim 0.
View row_block(View v, int64_t r0, int64_t n) {
  if (n > 0) v.data += r0 * v.strides[0] * dtype_size(v.dtype);
  v.dims[0] = n;
  return v;
}

// Runs rows [r0, r0 + n) of a region; full[k] holds escaping value rg.escaping[k] (all rows).
void run_region_block(const Plan& plan, const Plan::RowRegion& rg, const std::vector<RtValue>& rt,
                      const std::vector<Buffer>& full, int64_t r0, int64_t n) {
  const ir::Program& p = plan.program;
  std::vector<RtValue> local(rg.local.size());
  // Per-thread scratch for values that live only inside the block (sized once per block, so the views
  // handed out stay valid; run_region_block never nests on one thread).
  // Blocks of very long rows (over kMaxCachedScratch) use a temporary instead, so that no thread keeps a
  // huge buffer alive after the call.
  constexpr size_t kMaxCachedScratch = size_t{16} << 20;
  thread_local std::vector<std::byte> scratch;
  std::vector<std::byte> big;
  const size_t need = static_cast<size_t>(n) * rg.local_row_bytes + 64 * (rg.local.size() + 1);
  std::vector<std::byte>& mem = need > kMaxCachedScratch ? big : scratch;
  if (mem.size() < need) mem.resize(need);
  std::byte* bump = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) & ~uintptr_t{63});
  auto block_dims = [&](ValueId v) {
    std::vector<int64_t> d = plan.dims[v];
    d[0] = n;
    return d;
  };
  auto input = [&](ValueId v) -> RtValue {
    auto it = rg.local.find(v);
    if (it != rg.local.end()) return local[it->second];
    if (rt[v].view.dims != plan.dims[v] || plan.dims[v].empty()) {
      throw std::logic_error(absl::StrCat("[cpu] row region reads value ", v, " before it is computed"));
    }
    RtValue x;
    x.view = row_block(rt[v].view, r0, n);
    return x;
  };
  // Storage for a value made in this block: its rows of the full buffer when it escapes.
  auto output = [&](ValueId v) -> RtValue {
    auto it = rg.escape_slot.find(v);
    if (it == rg.escape_slot.end()) {
      RtValue x;
      x.view.data = bump;
      x.view.dtype = p.type(v).dtype;
      x.view.dims = block_dims(v);
      x.view.strides = contiguous_strides(x.view.dims);
      bump += (x.view.num_elements() * dtype_size(x.view.dtype) + 63) / 64 * 64;
      return x;
    }
    RtValue x;
    x.base = full[it->second];
    x.view = row_block(view_of(x.base), r0, n);
    return x;
  };
  for (const Plan::Step& st : rg.steps) {
    if (st.kind == Plan::StepKind::kFused) {
      const Plan::GroupPlan& gp = plan.groups[st.group];
      std::vector<View> leaves;
      for (ValueId l : gp.leaves) leaves.push_back(input(l).view);
      std::vector<std::byte*> outs;
      for (ValueId o : gp.outputs) {
        RtValue& dst = local[rg.local.at(o)];
        dst = output(o);
        outs.push_back(dst.view.data);
      }
      run_fused(gp.group, leaves, outs, n);
      continue;
    }
    const ir::Instr& in = p.defining_instr(st.value);
    RtValue& dst = local[rg.local.at(st.value)];
    if (st.kind == Plan::StepKind::kView) {
      dst = apply_view(st, in, block_dims(st.value), input(in.operands[0]));
      continue;
    }
    Buffer r = reduce(in.kind, input(in.operands[0]).view, std::get<step_attrs::Axes>(st.attrs).dimensions);
    dst = output(st.value);
    if (r.nbytes() > 0) std::memcpy(dst.view.data, r.data(), r.nbytes());
  }
}

// Hands a region's escaping values (full[k] is rg.escaping[k]) and its views needed later to rt.
void finish_region(const Plan& plan, const Plan::RowRegion& rg, std::vector<RtValue>& rt, std::vector<Buffer>& full) {
  for (size_t k = 0; k < rg.escaping.size(); ++k) rt[rg.escaping[k]] = from_buffer(std::move(full[k]));
  for (const Plan::Step& st : rg.post_views) {
    const ir::Instr& in = plan.program.defining_instr(st.value);
    rt[st.value] = apply_view(st, in, plan.dims[st.value], rt[in.operands[0]]);
  }
}

void run_region(const Plan& plan, const Plan::RowRegion& rg, std::vector<RtValue>& rt) {
  const ir::Program& p = plan.program;
  std::vector<Buffer> full;
  for (ValueId v : rg.escaping) full.push_back(Buffer::uninitialized(p.type(v).dtype, plan.dims[v]));
  if (rg.row_kernel) {
    std::vector<View> reads;
    for (ValueId v : rg.reads) reads.push_back(rt[v].view);
    if (run_row_kernel(*rg.row_program, reinterpret_cast<RowKernelFn>(rg.row_kernel->code), reads, full)) {
      finish_region(plan, rg, rt, full);
      return;
    }
  }
  // Blocks: cache-sized, but at least two per thread when there are enough rows. Block boundaries do
  // not change any value (every op is row-local and reductions are per row), so results do not depend
  // on the thread count.
  const int64_t R = rg.rows;
  const int64_t per_thread = (R + 2 * num_threads() - 1) / (2 * num_threads());
  const int64_t block = std::max<int64_t>(1, std::min(rg.max_block_rows, per_thread));
  const int64_t num_blocks = R == 0 ? 0 : (R + block - 1) / block;
  if (num_blocks == 0) {
    // No rows: still give escaping values their (empty) storage.
  } else if (block >= R) {
    run_region_block(plan, rg, rt, full, 0, R);
  } else {
    parallel_for(num_blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t r0 = k * block;
        run_region_block(plan, rg, rt, full, r0, std::min(block, R - r0));
      }
    });
  }
  finish_region(plan, rg, rt, full);
}

// The state of one execute() call: the run-time value of every program value so far.
struct Run {
  const Plan& plan;
  const ExecutionContext* ctx;
  std::vector<RtValue> rt;
};

// A step's runner: runs it and stores what it makes in run.rt. A kernel may also throw (execute converts).
using StepRunner = absl::Status (*)(const Plan::Step& st, Run& run);

absl::Status run_view_step(const Plan::Step& st, Run& run) {
  const ir::Instr& in = run.plan.program.defining_instr(st.value);
  run.rt[st.value] = apply_view(st, in, run.plan.dims[st.value], run.rt[in.operands[0]]);
  return absl::OkStatus();
}

// One op: debug_print (its callback), an SPMD op (its collective, through run.ctx) or a local kernel.
absl::Status run_op_step(const Plan::Step& st, Run& run) {
  const Plan& plan = run.plan;
  const ir::Instr& in = plan.program.defining_instr(st.value);
  if (in.kind == OpKind::kDebugPrint) {
    std::vector<Buffer> ops;
    for (ValueId o : in.operands) ops.push_back(to_buffer(run.rt[o]));
    MCX_ASSIGN_OR_RETURN(Buffer r, run_debug_print(in, ops, run.ctx));
    run.rt[st.value] = from_buffer(std::move(r));
  } else if (is_spmd_op(in.kind)) {
    // The operand as contiguous bytes (materialised only when the view is strided); axis_index has none.
    HostOperand operand;
    Buffer owned;
    if (!in.operands.empty()) {
      const View& v = run.rt[in.operands[0]].view;
      if (!v.is_contiguous()) owned = materialize(v);
      operand = {v.is_contiguous() ? static_cast<const void*>(v.data) : owned.data(), v.dims};
    }
    MCX_ASSIGN_OR_RETURN(Buffer r, run_spmd_op_on_host(in, operand, plan.dims[st.value], run.ctx));
    run.rt[st.value] = from_buffer(std::move(r));
  } else {
    run.rt[st.value] = from_buffer(execute_op(st, in, plan.dims[st.value], run.rt));
  }
  return absl::OkStatus();
}

// A fused group: its outputs into fresh storage, or into the storage of the leaf the planner chose for reuse.
absl::Status run_fused_step(const Plan::Step& st, Run& run) {
  const Plan& plan = run.plan;
  const Plan::GroupPlan& gp = plan.groups[st.group];
  std::vector<View> leaves;
  leaves.reserve(gp.leaves.size());
  for (ValueId l : gp.leaves) leaves.push_back(run.rt[l].view);
  std::vector<std::byte*> outs;
  std::vector<Buffer> out_bufs;
  for (size_t j = 0; j < gp.outputs.size(); ++j) {
    const ValueId o = gp.outputs[j];
    Buffer b = gp.inplace_leaf[j] >= 0 ? run.rt[gp.leaves[gp.inplace_leaf[j]]].base
                                        : Buffer::uninitialized(plan.program.type(o).dtype, plan.dims[o]);
    outs.push_back(static_cast<std::byte*>(b.mutable_data()));
    out_bufs.push_back(std::move(b));
  }
  run_fused(gp.group, leaves, outs);
  for (size_t j = 0; j < gp.outputs.size(); ++j) run.rt[gp.outputs[j]] = from_buffer(std::move(out_bufs[j]));
  return absl::OkStatus();
}

absl::Status run_row_region_step(const Plan::Step& st, Run& run) {
  run_region(run.plan, run.plan.regions[st.region], run.rt);
  return absl::OkStatus();
}

// A group of control-flow siblings: one run of the op gives every sibling's value.
absl::Status run_control_flow_step(const Plan::Step& st, Run& run) {
  std::vector<Buffer> operands;
  for (ValueId o : run.plan.program.defining_instr(st.value).operands) operands.push_back(to_buffer(run.rt[o]));
  MCX_ASSIGN_OR_RETURN(std::vector<Buffer> r, st.control_flow->run(operands, run.ctx));
  for (size_t k = 0; k < st.sibling_values.size(); ++k) {
    if (st.sibling_values[k] >= 0) run.rt[st.sibling_values[k]] = from_buffer(std::move(r[k]));
  }
  return absl::OkStatus();
}

// execute's dispatch: the runner of each step kind, in the order of Plan::StepKind.
constexpr std::array<StepRunner, Plan::kNumStepKinds> kStepRunners = {
    run_view_step, run_op_step, run_fused_step, run_row_region_step, run_control_flow_step};
static_assert(static_cast<int>(Plan::StepKind::kView) == 0 && static_cast<int>(Plan::StepKind::kOp) == 1 &&
              static_cast<int>(Plan::StepKind::kFused) == 2 && static_cast<int>(Plan::StepKind::kRowRegion) == 3 &&
              static_cast<int>(Plan::StepKind::kControlFlow) == 4 && Plan::kNumStepKinds == 5,
              "kStepRunners lists one runner per step kind, in the enum's order");

}  // namespace

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::compile(const ir::Program& program) {
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, plan_program(program));
  return std::shared_ptr<const CpuExecutable>(new CpuExecutable(std::move(plan)));
}

CpuExecutable::CpuExecutable(std::unique_ptr<Plan> plan) : plan_(std::move(plan)) {}
CpuExecutable::~CpuExecutable() = default;
CpuExecutable::Summary CpuExecutable::summary() const {
  Summary r;
  r.fused_groups = static_cast<int>(plan_->groups.size());
  for (const Plan::GroupPlan& gp : plan_->groups) r.group_kernels += gp.group.kernel != nullptr;
  r.row_regions = static_cast<int>(plan_->regions.size());
  for (const Plan::RowRegion& rg : plan_->regions) r.row_kernels += rg.row_kernel != nullptr;
  return r;
}

const ir::Program& CpuExecutable::program() const { return plan_->program; }
bool CpuExecutable::has_collectives() const { return plan_->has_collectives; }

absl::StatusOr<std::vector<Buffer>> CpuExecutable::execute(std::span<const Buffer> args,
                                                           const ExecutionContext* ctx) const {
  const Plan& plan = *plan_;
  const ir::Program& p = plan.program;
  if (static_cast<int>(args.size()) != p.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("[execute] expected ", p.num_params(), " arguments, found ",
                                                   args.size()));
  }
  for (int i = 0; i < p.num_params(); ++i) {
    // A default-constructed Buffer has no storage (and reads as a scalar): refuse it explicitly.
    const bool has_storage = args[i].data() != nullptr || product(plan.dims[i]) == 0;
    if (args[i].dtype() != p.params[i].dtype || args[i].dims() != plan.dims[i] || !has_storage) {
      return absl::InvalidArgumentError(absl::StrCat("[execute] argument ", i, ": expected ",
                                                     p.params[i].to_string(), ", found ",
                                                     args[i].abstract_value().to_string(),
                                                     has_storage ? "" : " without storage"));
    }
  }
  Run run{plan, ctx, std::vector<RtValue>(p.num_values())};
  for (int i = 0; i < p.num_params(); ++i) run.rt[i] = from_buffer(args[i]);
  for (const auto& [v, c] : plan.constants) run.rt[v] = from_buffer(c);
  try {
    for (const Plan::Step& st : plan.steps) {
      MCX_RETURN_IF_ERROR(kStepRunners[static_cast<int>(st.kind)](st, run));
      for (ValueId v : st.release) run.rt[v] = RtValue{};
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("[execute] ", p.name, ": ", e.what()));
  }
  std::vector<Buffer> results;
  results.reserve(p.results.size());
  for (ValueId r : p.results) results.push_back(to_buffer(run.rt[r]));
  return results;
}

}  // namespace mcx::cpu
