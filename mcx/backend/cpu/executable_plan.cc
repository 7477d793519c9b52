// The planner (executable_plan.h): plan_program and the phases it runs, except row regions
// (executable_row_regions.cc), kernel generation (executable_kernels.cc) and step attributes
// (executable_step_attrs.cc).
#include "mcx/backend/cpu/executable_plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/backend/cpu/fusion.h"
#include "mcx/core/error.h"
#include "mcx/core/profiler.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;
using ir::ValueId;
using Plan = CpuExecutable::Plan;

// sharding_constraint and remat_barrier are the identity on values: aliases, like a reshape to the same dims.
bool is_view_op(OpKind k) {
  return k == OpKind::kBroadcastInDim || k == OpKind::kTranspose || k == OpKind::kSlice ||
         k == OpKind::kReverse || k == OpKind::kReshape || k == OpKind::kShardingConstraint ||
         k == OpKind::kRematBarrier;
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

// The fused step of group g, placed where its last member is: leaves (operands from outside the group, in
// first-use order), nodes over leaf and member slots, and the members that escape as outputs.
Plan::Step schedule_group(Plan& plan, const FusionGroups& fusion, int g) {
  const ir::Program& p = plan.program;
  const std::vector<ValueId>& members = fusion.members[g];
  Plan::GroupPlan& gp = plan.groups[g];
  gp.group.dims = plan.dims[members.back()];
  std::map<ValueId, int> slot;
  for (ValueId m : members) {
    for (ValueId o : p.defining_instr(m).operands) {
      if (fusion.group_of[o] == g || slot.count(o)) continue;
      slot[o] = static_cast<int>(gp.leaves.size());
      gp.leaves.push_back(o);
      gp.group.leaf_dtypes.push_back(p.type(o).dtype);
    }
  }
  const int L = static_cast<int>(gp.leaves.size());
  for (size_t k = 0; k < members.size(); ++k) slot[members[k]] = L + static_cast<int>(k);
  for (size_t k = 0; k < members.size(); ++k) {
    const ValueId m = members[k];
    const ir::Instr& mi = p.defining_instr(m);
    FusedNode node{mi.kind, mi.type.dtype, p.type(mi.operands.back()).dtype, {}};
    for (ValueId o : mi.operands) node.args.push_back(slot[o]);
    gp.group.nodes.push_back(std::move(node));
    if (fusion.escapes[m]) {
      gp.group.outputs.push_back(static_cast<int>(k));
      gp.outputs.push_back(m);
    }
  }
  Plan::Step st;
  st.kind = Plan::StepKind::kFused;
  st.group = g;
  return st;
}

}  // namespace

absl::StatusOr<ir::Program> program_for_plan(const ir::Program& program) {
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
  // Custom-rule calls run their function, inlined so that it fuses with its neighbours.
  if (ir::has_custom_calls(program)) return ir::inline_custom_calls(program);
  return program;
}

absl::Status fill_program_facts(CpuExecutable::Plan& plan) {
  const ir::Program& p = plan.program;
  const int V = p.num_values();
  plan.dims.assign(V, {});
  for (ir::ValueId v = 0; v < V; ++v) {
    auto d = to_concrete(p.type(v).shape);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("[cpu_compile] value ", v, " has symbolic type ",
                                                     p.type(v).to_string(),
                                                     "; specialise the program to concrete shapes first"));
    }
    plan.dims[v] = *std::move(d);
  }
  plan.constants.clear();
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    if (p.instrs[i].kind != OpKind::kConstant) continue;
    MCX_ASSIGN_OR_RETURN(Buffer c, p.instrs[i].attrs.get_buffer("value"));
    plan.constants[p.num_params() + i] = std::move(c);
  }
  return absl::OkStatus();
}

absl::StatusOr<FusionGroups> form_fusion_groups(const CpuExecutable::Plan& plan) {
  return kernelgen::form_element_groups(plan.program, plan.dims, [](const ir::Program& p, int i) -> absl::Status {
    const ir::Instr& in = p.instrs[i];
    if (elementwise_supported(in.kind, in.type.dtype, p.type(in.operands.back()).dtype)) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat("[cpu_compile] instruction ", i, " (", std::string(ir::op_name(in.kind)),
                                                 "): no CPU kernel for ", in.type.to_string()));
  });
}

absl::Status schedule_steps(CpuExecutable::Plan& plan, const FusionGroups& fusion) {
  const ir::Program& p = plan.program;
  const int P = p.num_params();
  plan.groups.assign(fusion.members.size(), {});
  plan.steps.clear();
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const ir::Instr& in = p.instrs[i];
    const ValueId v = P + i;
    if (in.kind == OpKind::kConstant) continue;  // fill_program_facts took its value
    if (const int g = fusion.group_of[v]; g >= 0) {
      if (fusion.members[g].back() == v) plan.steps.push_back(schedule_group(plan, fusion, g));
      continue;
    }
    if (ir::has_regions(in.kind)) {
      MCX_RETURN_IF_ERROR(schedule_control_flow(plan, v));
      continue;
    }
    Plan::Step st;
    st.kind = is_view_op(in.kind) ? Plan::StepKind::kView : Plan::StepKind::kOp;
    st.value = v;
    MCX_ASSIGN_OR_RETURN(st.attrs, parse_step_attrs(in));
    plan.steps.push_back(std::move(st));
  }
  return absl::OkStatus();
}

std::vector<ir::ValueId> step_reads(const CpuExecutable::Plan& plan, const CpuExecutable::Plan::Step& st) {
  switch (st.kind) {
    case Plan::StepKind::kFused: return plan.groups[st.group].leaves;
    case Plan::StepKind::kRowRegion: return plan.regions[st.region].reads;
    default: return plan.program.defining_instr(st.value).operands;
  }
}

Liveness plan_releases(CpuExecutable::Plan& plan, const FusionGroups& fusion) {
  const ir::Program& p = plan.program;
  const int V = p.num_values();
  Liveness live;
  live.root.resize(V);
  for (ValueId v = 0; v < V; ++v) {
    live.root[v] = v;
    if (!p.is_param(v) && is_view_op(p.defining_instr(v).kind)) {
      live.root[v] = live.root[p.defining_instr(v).operands[0]];
    }
  }
  const int S = static_cast<int>(plan.steps.size());
  live.last_use.assign(V, -1);
  for (int s = 0; s < S; ++s) {
    for (ValueId o : step_reads(plan, plan.steps[s])) {
      live.last_use[live.root[o]] = std::max(live.last_use[live.root[o]], s);
    }
  }
  live.pinned.assign(V, false);
  for (ValueId r : p.results) live.pinned[live.root[r]] = true;
  for (ValueId v = 0; v < V; ++v) {
    // A group value that does not escape has no storage of its own: the group's tiles hold it.
    if (live.pinned[live.root[v]] || (fusion.group_of[v] >= 0 && !fusion.escapes[v])) continue;
    const int s = live.last_use[live.root[v]];
    if (s >= 0) plan.steps[s].release.push_back(v);
  }
  return live;
}

void plan_inplace_reuse(CpuExecutable::Plan& plan, const Liveness& live) {
  const ir::Program& p = plan.program;
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) {
    Plan::Step& st = plan.steps[s];
    if (st.kind != Plan::StepKind::kFused) continue;
    Plan::GroupPlan& gp = plan.groups[st.group];
    gp.inplace_leaf.assign(gp.outputs.size(), -1);
    std::vector<bool> used(gp.leaves.size(), false);
    for (size_t j = 0; j < gp.outputs.size(); ++j) {
      const AbstractValue& ot = p.type(gp.outputs[j]);
      for (size_t l = 0; l < gp.leaves.size(); ++l) {
        const ValueId lv = gp.leaves[l];
        if (used[l] || p.is_param(lv) || live.root[lv] != lv || plan.constants.count(lv) || live.pinned[lv]) continue;
        // A collective's result may be storage shared with the other members of its group; a control-flow
        // result may be its operand's storage (a carry a loop passes through, or zero iterations).
        const OpKind lk = p.defining_instr(lv).kind;
        if (ir::is_collective(lk) || ir::has_regions(lk)) continue;
        if (live.last_use[lv] != s || p.type(lv).dtype != ot.dtype || plan.dims[lv] != plan.dims[gp.outputs[j]]) {
          continue;
        }
        bool shared = false;
        for (size_t l2 = 0; l2 < gp.leaves.size(); ++l2) shared |= (l2 != l && live.root[gp.leaves[l2]] == lv);
        if (shared) continue;
        used[l] = true;
        gp.inplace_leaf[j] = static_cast<int>(l);
        break;
      }
    }
  }
}

void note_collectives(CpuExecutable::Plan& plan) {
  plan.has_collectives = false;
  for (const ir::Instr& in : plan.program.instrs) plan.has_collectives |= ir::is_collective(in.kind);
  for (const Plan::Step& st : plan.steps) {
    if (st.kind == Plan::StepKind::kControlFlow) plan.has_collectives |= st.control_flow->has_collectives();
  }
}

absl::StatusOr<std::unique_ptr<CpuExecutable::Plan>> plan_program(const ir::Program& program) {
  profiler::Scope traced("compile", "plan ", program.name);
  auto plan = std::make_unique<Plan>();
  MCX_ASSIGN_OR_RETURN(plan->program, program_for_plan(program));
  MCX_RETURN_IF_ERROR(fill_program_facts(*plan));
  MCX_ASSIGN_OR_RETURN(const FusionGroups fusion, form_fusion_groups(*plan));
  MCX_RETURN_IF_ERROR(schedule_steps(*plan, fusion));
  form_row_regions(*plan);  // before liveness, so that a region counts as one step
  const Liveness live = plan_releases(*plan, fusion);
  plan_inplace_reuse(*plan, live);
  note_collectives(*plan);
  {
    profiler::Scope generating("compile", "generate kernels for ", program.name);
    generate_kernels(*plan);
  }
  if (traced.recording()) traced.arg("steps", static_cast<int64_t>(plan->steps.size()));
  return plan;
}

}  // namespace mcx::cpu
