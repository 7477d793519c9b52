// Planner phase 5 (executable_plan.h): row-block regions, the runs of steps that execute row block by row block
// (Plan::RowRegion: softmax and the like).
#include <algorithm>
#include <set>
#include <vector>

#include "mcx/backend/cpu/executable_plan.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;
using ir::ValueId;
using Plan = CpuExecutable::Plan;

bool is_reduction(OpKind k) {
  return k == OpKind::kReduceSum || k == OpKind::kReduceMax || k == OpKind::kReduceMin || k == OpKind::kReduceProd;
}

constexpr int64_t kRowBlockBytes = 128 * 1024;  // per value of a row block: a few values stay in L2

}  // namespace

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

}  // namespace mcx::cpu
