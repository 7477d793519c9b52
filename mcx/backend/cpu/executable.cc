// CpuExecutable: compile = verify + plan (schedule, fusion groups, liveness, in-place reuse); execute =
// walk the plan with per-call state only (so concurrent execute calls are safe).
//
// Values at run time are strided views over shared storage. broadcast_in_dim, transpose, slice, reverse
// and reshape (of a contiguous value) are views: no data moves. Element-wise ops are grouped into fused
// regions (fusion.h) that read those views directly, tile by tile. Every other op is one kernel call
// (kernels.h) that materialises what it needs.
#include "mcx/backend/cpu/executable.h"

#include <algorithm>
#include <exception>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/codegen/row_kernel.h"
#include "mcx/backend/cpu/collectives.h"
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
#include "mcx/core/logging.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::cpu {

using ir::OpKind;
using ir::ValueId;

namespace {

// sharding_constraint and remat_barrier are the identity on values: aliases, like a reshape to the same dims.
bool is_view_op(OpKind k) {
  return k == OpKind::kBroadcastInDim || k == OpKind::kTranspose || k == OpKind::kSlice ||
         k == OpKind::kReverse || k == OpKind::kReshape || k == OpKind::kShardingConstraint ||
         k == OpKind::kRematBarrier;
}

bool is_fusible(OpKind k) {
  return (ir::is_elementwise(k) && k != OpKind::kRematBarrier) || k == OpKind::kConvert || k == OpKind::kIsFinite;
}

struct RtValue {
  Buffer base;  // keeps the storage alive
  View view;
};

}  // namespace

namespace {

using Plan = CpuExecutable::Plan;

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


bool is_reduction(OpKind k) {
  return k == OpKind::kReduceSum || k == OpKind::kReduceMax || k == OpKind::kReduceMin || k == OpKind::kReduceProd;
}

// A control-flow instruction v joins the step of an earlier sibling, or starts a step that runs the group.
absl::Status schedule_control_flow(Plan& plan, ValueId v) {
  const ir::Program& p = plan.program;
  const ir::Instr& in = p.defining_instr(v);
  const int result = ir::result_index(in);
  for (auto it = plan.steps.rbegin(); it != plan.steps.rend(); ++it) {
    if (it->kind != Plan::StepKind::kControlFlow || !ir::are_siblings(p.defining_instr(it->value), in)) continue;
    if (it->sibling_values[result] < 0) {
      it->sibling_values[result] = v;
      return absl::OkStatus();
    }
    break;  // a duplicate sibling (no CSE ran): it gets a step of its own
  }
  std::vector<AbstractValue> operand_types;
  for (ValueId o : in.operands) operand_types.push_back(p.type(o));
  Plan::Step st;
  st.kind = Plan::StepKind::kControlFlow;
  st.value = v;
  MCX_ASSIGN_OR_RETURN(st.control_flow, ControlFlowRunner::compile(in, operand_types));
  st.sibling_values.assign(st.control_flow->num_results(), -1);
  st.sibling_values[result] = v;
  plan.steps.push_back(std::move(st));
  return absl::OkStatus();
}

// Values a top-level step reads.
std::vector<ValueId> step_reads(const Plan& plan, const Plan::Step& st) {
  switch (st.kind) {
    case Plan::StepKind::kFused: return plan.groups[st.group].leaves;
    case Plan::StepKind::kRowRegion: return plan.regions[st.region].reads;
    default: return plan.program.defining_instr(st.value).operands;
  }
}

constexpr int64_t kRowBlockBytes = 128 * 1024;  // per value of a row block: a few values stay in L2

// Replaces maximal runs of row-blockable steps (see Plan::RowRegion) that hold at least one reduction and
// one fused group by one kRowRegion step. Views of outside values met in a run move before the region.
void form_row_regions(Plan& plan) {
  const ir::Program& p = plan.program;
  auto rows_of = [&](const Plan::Step& st) -> int64_t {
    if (st.kind == Plan::StepKind::kFused) {
      const auto& d = plan.groups[st.group].group.dims;
      return d.empty() ? -1 : d[0];
    }
    if (st.kind != Plan::StepKind::kOp) return -1;
    const ir::Instr& in = p.defining_instr(st.value);
    if (!is_reduction(in.kind)) return -1;
    const auto& d = plan.dims[in.operands[0]];
    const auto& axes = std::get<step_attrs::Axes>(st.attrs).dimensions;
    if (d.empty() || std::find(axes.begin(), axes.end(), 0) != axes.end()) return -1;
    return d[0];
  };
  std::vector<Plan::Step> out;
  const int S = static_cast<int>(plan.steps.size());
  for (int i = 0; i < S;) {
    const int64_t R = rows_of(plan.steps[i]);
    if (R < 0) {
      out.push_back(std::move(plan.steps[i++]));
      continue;
    }
    Plan::RowRegion rg;
    rg.rows = R;
    std::vector<int> hoisted;
    int reductions = 0, groups = 0, j = i;
    for (; j < S; ++j) {
      const Plan::Step& st = plan.steps[j];
      std::vector<ValueId> made;
      if (st.kind == Plan::StepKind::kView) {
        const ir::Instr& in = p.defining_instr(st.value);
        if (!rg.local.count(in.operands[0])) {
          hoisted.push_back(j);
          continue;
        }
        // Views that keep every row's elements in that row: broadcasts that map dim 0 to dim 0, and
        // reshapes that keep dim 0 (row-major, so row r's elements stay row r's; a block of a local value
        // is contiguous, so the reshape of a block is a view of it).
        const bool keeps_rows = !plan.dims[st.value].empty() && !plan.dims[in.operands[0]].empty() &&
                                plan.dims[st.value][0] == R && plan.dims[in.operands[0]][0] == R;
        const auto* bcast = std::get_if<step_attrs::BroadcastInDim>(&st.attrs);
        const bool row_broadcast = in.kind == OpKind::kBroadcastInDim && !bcast->broadcast_dimensions.empty() &&
                                   bcast->broadcast_dimensions[0] == 0;
        if (!keeps_rows || !(row_broadcast || in.kind == OpKind::kReshape)) break;
        made.push_back(st.value);
      } else if (rows_of(st) == R) {
        if (st.kind == Plan::StepKind::kFused) {
          ++groups;
          made = plan.groups[st.group].outputs;
        } else {
          ++reductions;
          made.push_back(st.value);
        }
      } else {
        break;
      }
      for (ValueId v : made) rg.local.emplace(v, static_cast<int>(rg.local.size()));
      rg.steps.push_back(st);
    }
    if (reductions == 0 || groups == 0) {
      out.push_back(std::move(plan.steps[i++]));
      continue;
    }
    for (int h : hoisted) out.push_back(std::move(plan.steps[h]));
    Plan::Step st;
    st.kind = Plan::StepKind::kRowRegion;
    st.region = static_cast<int>(plan.regions.size());
    plan.regions.push_back(std::move(rg));
    out.push_back(std::move(st));
    i = j;
  }
  plan.steps = std::move(out);

  // What each region reads from outside (all regions first: a region's needed values include what later
  // regions read), then what it must leave behind, and its block size.
  for (Plan::RowRegion& rg : plan.regions) {
    std::set<ValueId> reads;
    for (const Plan::Step& st : rg.steps) {
      std::vector<ValueId> in = st.kind == Plan::StepKind::kFused ? plan.groups[st.group].leaves
                                                                   : p.defining_instr(st.value).operands;
      for (ValueId v : in) {
        if (!rg.local.count(v)) reads.insert(v);
      }
    }
    rg.reads.assign(reads.begin(), reads.end());
  }
  for (size_t r = 0; r < plan.regions.size(); ++r) {
    Plan::RowRegion& rg = plan.regions[r];
    std::set<ValueId> needed(p.results.begin(), p.results.end());
    for (const Plan::Step& st : plan.steps) {
      if (st.kind == Plan::StepKind::kRowRegion && st.region == static_cast<int>(r)) continue;
      for (ValueId v : step_reads(plan, st)) needed.insert(v);
    }
    int64_t row_bytes = 1;
    auto note_row = [&](ValueId v) {
      row_bytes = std::max(row_bytes, product(plan.dims[v]) / std::max<int64_t>(1, rg.rows) * dtype_size(p.type(v).dtype));
    };
    for (ValueId v : rg.reads) note_row(v);
    // Backwards, so that a needed view makes its operand needed too.
    for (auto it = rg.steps.rbegin(); it != rg.steps.rend(); ++it) {
      if (it->kind == Plan::StepKind::kView) {
        if (needed.count(it->value)) {
          rg.post_views.insert(rg.post_views.begin(), *it);
          needed.insert(p.defining_instr(it->value).operands[0]);
        }
        continue;
      }
      std::vector<ValueId> made = it->kind == Plan::StepKind::kFused ? plan.groups[it->group].outputs
                                                                      : std::vector<ValueId>{it->value};
      for (ValueId v : made) {
        note_row(v);
        if (needed.count(v)) {
          rg.escape_slot[v] = 0;
        } else {
          rg.local_row_bytes += product(plan.dims[v]) / std::max<int64_t>(1, rg.rows) * dtype_size(p.type(v).dtype);
        }
      }
    }
    for (auto& [v, slot] : rg.escape_slot) {
      slot = static_cast<int>(rg.escaping.size());
      rg.escaping.push_back(v);
    }
    rg.max_block_rows = std::max<int64_t>(1, kRowBlockBytes / row_bytes);
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

// Logs, once per process, a failed code generation (a bug in the generator, not in the program). Unimplemented
// is by design (the generator does not take that source: it runs on the interpreter, its intended path).
void note_codegen_failure(const absl::Status& st) {
  if (st.code() == absl::StatusCode::kUnimplemented) return;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    log_warn("[cpu_compile] code generation failed, running the interpreter instead: {}", std::string(st.message()));
  });
}

// Generates machine code, in parallel on the thread pool: a kernel for each row region that is a row program
// (codegen/row_kernel.h), then one for each fused group outside those regions (codegen/fused_kernel.h). A
// source the generator does not take, or whose compile fails, stays on the interpreter. A region without a
// kernel runs its steps with its groups' own kernels; a region with one whose reads do not fit it at run
// time (run_row_kernel) runs its steps on the interpreter, since its groups were not generated separately.
void generate_kernels(Plan& plan) {
  if (!codegen::enabled()) return;
  std::vector<Plan::RowRegion*> row_candidates;
  for (Plan::RowRegion& rg : plan.regions) {
    absl::StatusOr<RowProgram> rp = plan_row_program(plan, rg);
    if (!rp.ok()) continue;
    rg.row_program = std::make_shared<const RowProgram>(*std::move(rp));
    row_candidates.push_back(&rg);
  }
  parallel_for(static_cast<int64_t>(row_candidates.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      auto kernel = codegen::compile_rows(*row_candidates[k]->row_program);
      if (kernel.ok()) row_candidates[k]->row_kernel = *std::move(kernel);
      else note_codegen_failure(kernel.status());
    }
  });
  std::vector<bool> covered(plan.groups.size(), false);
  for (const Plan::RowRegion& rg : plan.regions) {
    if (!rg.row_kernel) continue;
    for (const Plan::Step& st : rg.steps) {
      if (st.kind == Plan::StepKind::kFused) covered[st.group] = true;
    }
  }
  std::vector<FusedGroup*> candidates;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    FusedGroup& group = plan.groups[g].group;
    if (!covered[g] && static_cast<int>(group.nodes.size()) >= codegen::kMinNodesToGenerate) {
      candidates.push_back(&group);
    }
  }
  parallel_for(static_cast<int64_t>(candidates.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      absl::StatusOr<std::shared_ptr<const codegen::GeneratedKernel>> kernel = codegen::compile_fused(*candidates[k]);
      if (kernel.ok()) candidates[k]->kernel = *std::move(kernel);
      else note_codegen_failure(kernel.status());
    }
  });
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::compile(const ir::Program& program) {
  MCX_RETURN_IF_ERROR(ir::verify(program));
  for (const ir::Instr& in : program.instrs) {
    if (in.kind != ir::OpKind::kShardMap) continue;
    auto mesh = in.attrs.get_ints("mesh_shape");
    return absl::InvalidArgumentError(absl::StrCat(
        "[shard_map] program @", program.name, " holds a shard_map over a mesh of shape [",
        mesh.ok() ? absl::StrJoin(*mesh, ", ") : std::string("?"),
        "]; it runs only partitioned on such a mesh (jit and grad pick the mesh of the shard_map they trace), "
        "not on one device"));
  }
  auto plan = std::make_unique<Plan>();
  // Custom-rule calls run their function, inlined so that it fuses with its neighbours.
  if (ir::has_custom_calls(program)) {
    MCX_ASSIGN_OR_RETURN(plan->program, ir::inline_custom_calls(program));
  } else {
    plan->program = program;
  }
  const ir::Program& p = plan->program;
  const int P = p.num_params();
  const int V = p.num_values();
  MCX_RETURN_IF_ERROR(fill_program_facts(*plan));

  // --- Fusion groups (see the header comment of fusion.h). A group stays open while none of its values
  // has been consumed outside it; an element-wise op joins the first open group of its operands.
  std::vector<int> group_of(V, -1);
  std::vector<bool> open;
  std::vector<std::vector<ValueId>> members;
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const ir::Instr& in = p.instrs[i];
    const ValueId v = P + i;
    if (is_fusible(in.kind)) {
      if (!elementwise_supported(in.kind, in.type.dtype, p.type(in.operands.back()).dtype)) {
        return absl::UnimplementedError(absl::StrCat("[cpu_compile] instruction ", i, " (", std::string(ir::op_name(in.kind)),
                                                     "): no CPU kernel for ", in.type.to_string()));
      }
      int g = -1;
      for (ValueId o : in.operands) {
        const int og = group_of[o];
        if (og >= 0 && open[og] && plan->dims[o] == plan->dims[v]) {
          g = og;
          break;
        }
      }
      for (ValueId o : in.operands) {
        if (group_of[o] >= 0 && group_of[o] != g) open[group_of[o]] = false;
      }
      if (g < 0) {
        g = static_cast<int>(members.size());
        members.emplace_back();
        open.push_back(true);
      }
      group_of[v] = g;
      members[g].push_back(v);
    } else {
      for (ValueId o : in.operands) {
        if (group_of[o] >= 0) open[group_of[o]] = false;
      }
    }
  }

  // Which group values are needed outside their group.
  std::vector<bool> escapes(V, false);
  for (ValueId r : p.results) escapes[r] = true;
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    for (ValueId o : p.instrs[i].operands) {
      if (group_of[o] >= 0 && group_of[o] != group_of[P + i]) escapes[o] = true;
    }
  }

  // --- Schedule: instruction order, each group placed at its last member.
  std::vector<ValueId> last_member(members.size());
  for (size_t g = 0; g < members.size(); ++g) last_member[g] = members[g].back();
  plan->groups.resize(members.size());
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const ir::Instr& in = p.instrs[i];
    const ValueId v = P + i;
    if (in.kind == OpKind::kConstant) continue;  // fill_program_facts took its value
    if (group_of[v] >= 0) {
      const int g = group_of[v];
      if (last_member[g] != v) continue;
      Plan::GroupPlan& gp = plan->groups[g];
      gp.group.dims = plan->dims[v];
      std::map<ValueId, int> slot;
      for (ValueId m : members[g]) {
        const ir::Instr& mi = p.defining_instr(m);
        for (ValueId o : mi.operands) {
          if (group_of[o] == g || slot.count(o)) continue;
          slot[o] = static_cast<int>(gp.leaves.size());
          gp.leaves.push_back(o);
          gp.group.leaf_dtypes.push_back(p.type(o).dtype);
        }
      }
      const int L = static_cast<int>(gp.leaves.size());
      for (size_t k = 0; k < members[g].size(); ++k) slot[members[g][k]] = L + static_cast<int>(k);
      for (size_t k = 0; k < members[g].size(); ++k) {
        const ValueId m = members[g][k];
        const ir::Instr& mi = p.defining_instr(m);
        FusedNode node{mi.kind, mi.type.dtype, p.type(mi.operands.back()).dtype, {}};
        for (ValueId o : mi.operands) node.args.push_back(slot[o]);
        gp.group.nodes.push_back(std::move(node));
        if (escapes[m]) {
          gp.group.outputs.push_back(static_cast<int>(k));
          gp.outputs.push_back(m);
        }
      }
      Plan::Step st;
      st.kind = Plan::StepKind::kFused;
      st.group = g;
      plan->steps.push_back(std::move(st));
      continue;
    }
    if (ir::has_regions(in.kind)) {
      MCX_RETURN_IF_ERROR(schedule_control_flow(*plan, v));
      continue;
    }
    Plan::Step st;
    st.kind = is_view_op(in.kind) ? Plan::StepKind::kView : Plan::StepKind::kOp;
    st.value = v;
    MCX_ASSIGN_OR_RETURN(st.attrs, parse_step_attrs(in));
    plan->steps.push_back(std::move(st));
  }

  // --- Row-block regions (softmax and friends), before liveness so that they count as one step.
  form_row_regions(*plan);

  // --- Liveness: a value's storage root is itself, or for a view the root of its operand. A root dies
  // after the last step that reads it or any view of it; results never die.
  std::vector<ValueId> root(V);
  for (ValueId v = 0; v < V; ++v) {
    root[v] = v;
    if (!p.is_param(v) && is_view_op(p.defining_instr(v).kind)) root[v] = root[p.defining_instr(v).operands[0]];
  }
  const int S = static_cast<int>(plan->steps.size());
  std::vector<int> last_use(V, -1);
  for (int s = 0; s < S; ++s) {
    for (ValueId o : step_reads(*plan, plan->steps[s])) last_use[root[o]] = std::max(last_use[root[o]], s);
  }
  std::vector<bool> pinned(V, false);  // results and anything a result is a view of
  for (ValueId r : p.results) pinned[root[r]] = true;
  for (ValueId v = 0; v < V; ++v) {
    if (pinned[root[v]] || (group_of[v] >= 0 && !escapes[v])) continue;
    const int s = last_use[root[v]];
    if (s >= 0) plan->steps[s].release.push_back(v);
  }

  // --- In-place reuse: a group output may take over the storage of a leaf that dies in this step, was
  // produced by this execution (not an argument or constant, not a collective), is not a view, matches
  // dtype and dims, and is the only leaf of the group over that storage.
  for (int s = 0; s < S; ++s) {
    Plan::Step& st = plan->steps[s];
    if (st.kind != Plan::StepKind::kFused) continue;
    Plan::GroupPlan& gp = plan->groups[st.group];
    gp.inplace_leaf.assign(gp.outputs.size(), -1);
    std::vector<bool> used(gp.leaves.size(), false);
    for (size_t j = 0; j < gp.outputs.size(); ++j) {
      const AbstractValue& ot = p.type(gp.outputs[j]);
      for (size_t l = 0; l < gp.leaves.size(); ++l) {
        const ValueId lv = gp.leaves[l];
        if (used[l] || p.is_param(lv) || root[lv] != lv || plan->constants.count(lv) || pinned[lv]) continue;
        // A collective's result may be storage shared with the other members of its group; a control-flow
        // result may be its operand's storage (a carry a loop passes through, or zero iterations).
        const OpKind lk = p.defining_instr(lv).kind;
        if (ir::is_collective(lk) || ir::has_regions(lk)) continue;
        if (last_use[lv] != s || p.type(lv).dtype != ot.dtype || plan->dims[lv] != plan->dims[gp.outputs[j]]) continue;
        bool shared = false;
        for (size_t l2 = 0; l2 < gp.leaves.size(); ++l2) shared |= (l2 != l && root[gp.leaves[l2]] == lv);
        if (shared) continue;
        used[l] = true;
        gp.inplace_leaf[j] = static_cast<int>(l);
        break;
      }
    }
  }
  for (const ir::Instr& in : p.instrs) plan->has_collectives |= ir::is_collective(in.kind);
  for (const Plan::Step& st : plan->steps)
    if (st.kind == Plan::StepKind::kControlFlow) plan->has_collectives |= st.control_flow->has_collectives();
  generate_kernels(*plan);
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
  std::vector<RtValue> rt(p.num_values());
  for (int i = 0; i < p.num_params(); ++i) rt[i] = from_buffer(args[i]);
  for (const auto& [v, c] : plan.constants) rt[v] = from_buffer(c);
  try {
    for (const Plan::Step& st : plan.steps) {
      if (st.kind == Plan::StepKind::kRowRegion) {
        run_region(plan, plan.regions[st.region], rt);
      } else if (st.kind == Plan::StepKind::kFused) {
        const Plan::GroupPlan& gp = plan.groups[st.group];
        std::vector<View> leaves;
        leaves.reserve(gp.leaves.size());
        for (ValueId l : gp.leaves) leaves.push_back(rt[l].view);
        std::vector<std::byte*> outs;
        std::vector<Buffer> out_bufs;
        for (size_t j = 0; j < gp.outputs.size(); ++j) {
          const ValueId o = gp.outputs[j];
          Buffer b = gp.inplace_leaf[j] >= 0 ? rt[gp.leaves[gp.inplace_leaf[j]]].base
                                              : Buffer::uninitialized(p.type(o).dtype, plan.dims[o]);
          outs.push_back(static_cast<std::byte*>(b.mutable_data()));
          out_bufs.push_back(std::move(b));
        }
        run_fused(gp.group, leaves, outs);
        for (size_t j = 0; j < gp.outputs.size(); ++j) rt[gp.outputs[j]] = from_buffer(std::move(out_bufs[j]));
      } else if (st.kind == Plan::StepKind::kControlFlow) {
        std::vector<Buffer> operands;
        for (ValueId o : p.defining_instr(st.value).operands) operands.push_back(to_buffer(rt[o]));
        absl::StatusOr<std::vector<Buffer>> r = st.control_flow->run(operands, ctx);
        if (!r.ok()) return r.status();
        for (size_t k = 0; k < st.sibling_values.size(); ++k)
          if (st.sibling_values[k] >= 0) rt[st.sibling_values[k]] = from_buffer(std::move((*r)[k]));
      } else {
        const ir::Instr& in = p.defining_instr(st.value);
        if (st.kind == Plan::StepKind::kView) {
          rt[st.value] = apply_view(st, in, plan.dims[st.value], rt[in.operands[0]]);
        } else if (in.kind == OpKind::kDebugPrint) {
          std::vector<Buffer> ops;
          for (ValueId o : in.operands) ops.push_back(to_buffer(rt[o]));
          absl::StatusOr<Buffer> r = run_debug_print(in, ops, ctx);
          if (!r.ok()) return r.status();
          rt[st.value] = from_buffer(*std::move(r));
        } else if (is_spmd_kernel(in.kind)) {
          std::vector<View> ops;
          for (ValueId o : in.operands) ops.push_back(rt[o].view);
          absl::StatusOr<Buffer> r = run_spmd_op(in, ops, plan.dims[st.value], ctx);
          if (!r.ok()) return r.status();
          rt[st.value] = from_buffer(*std::move(r));
        } else {
          rt[st.value] = from_buffer(execute_op(st, in, plan.dims[st.value], rt));
        }
      }
      for (ValueId v : st.release) rt[v] = RtValue{};
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("[execute] ", p.name, ": ", e.what()));
  }
  std::vector<Buffer> results;
  results.reserve(p.results.size());
  for (ValueId r : p.results) results.push_back(to_buffer(rt[r]));
  return results;
}

}  // namespace mcx::cpu
