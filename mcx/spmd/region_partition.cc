#include "mcx/spmd/region_partition.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/str_util.h"

namespace mcx::spmd::internal {
namespace {

using ir::internal::cat;
using ir::OpKind;

struct PartitionedRegion {
  std::shared_ptr<const ir::Program> program;
  std::vector<Layout> results;
};

// region partitioned with parameter layouts `params`; result r is resharded to results[r], or keeps its
// propagated layout when that is nullopt. Adds the region's statistics to *stats.
absl::StatusOr<PartitionedRegion> partition_region(const ir::Instr& instr, const std::string& role,
                                                   const ir::Program& region, const MeshAxes& mesh,
                                                   std::span<const Layout> params,
                                                   std::span<const std::optional<Layout>> results,
                                                   PartitionStats* stats) {
  std::vector<PartitionSpec> in;
  for (const Layout& l : params) in.push_back(spec_from_layout(l, mesh));
  std::vector<std::optional<PartitionSpec>> out;
  for (const std::optional<Layout>& l : results)
    out.push_back(l ? std::optional<PartitionSpec>(spec_from_layout(*l, mesh)) : std::nullopt);
  auto p = partition(region, mesh, in, out);
  if (!p.ok())
    return absl::Status(p.status().code(), cat("[partition] ", ir::op_name(instr.kind), " ", role, " (@", region.name,
                                               "): ", std::string(p.status().message())));
  PartitionedRegion r{std::make_shared<const ir::Program>(std::move(p->per_device)), {}};
  for (size_t i = 0; i < p->out_specs.size(); ++i)
    r.results.push_back(layout_from_spec(p->out_specs[i], mesh, region.type(region.results[i]).rank()));
  add_stats(*stats, std::move(p->stats), cat(" (in ", role, " of ", ir::op_name(instr.kind), ")"));
  return r;
}

std::vector<Layout> concat(std::span<const Layout> a, std::span<const Layout> b) {
  std::vector<Layout> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Every entry forced to its layout.
std::vector<std::optional<Layout>> forced(std::span<const Layout> layouts) {
  return std::vector<std::optional<Layout>>(layouts.begin(), layouts.end());
}

absl::StatusOr<RegionOpPlan> plan_scan(const ir::Instr& instr, std::span<const Layout> ops, const MeshAxes& mesh) {
  MCX_ASSIGN_OR_RETURN(ir::ScanConfig c, ir::get_scan_config(instr.attrs, ops.size()));
  RegionOpPlan plan;
  plan.operands.assign(ops.begin(), ops.end());
  std::vector<Layout> params(ops.begin(), ops.begin() + c.num_carry);
  for (int i = c.num_carry; i < c.num_carry + c.num_xs; ++i) {
    plan.operands[i][0].clear();  // the scanned dimension stays whole
    params.emplace_back(plan.operands[i].begin() + 1, plan.operands[i].end());
  }
  params.insert(params.end(), ops.begin() + c.num_carry + c.num_xs, ops.end());
  std::vector<std::optional<Layout>> want = forced(std::span<const Layout>(ops.data(), c.num_carry));
  want.resize(c.body->results.size());  // the ys: propagated
  MCX_ASSIGN_OR_RETURN(PartitionedRegion body,
                       partition_region(instr, "body", *c.body, mesh, params, want, &plan.stats));
  c.body = body.program;
  for (size_t r = 0; r < body.results.size(); ++r) {
    Layout l = body.results[r];
    if (static_cast<int>(r) >= c.num_carry) l.insert(l.begin(), AxisList{});  // the stacking dimension
    plan.results.push_back(std::move(l));
  }
  plan.attrs = ir::scan_attrs(c);
  return plan;
}

absl::StatusOr<RegionOpPlan> plan_while(const ir::Instr& instr, std::span<const Layout> ops, const MeshAxes& mesh) {
  MCX_ASSIGN_OR_RETURN(ir::WhileConfig c, ir::get_while_config(instr.attrs, ops.size()));
  RegionOpPlan plan;
  plan.operands.assign(ops.begin(), ops.end());
  const std::span<const Layout> carries = ops.subspan(0, c.num_carry);
  const std::vector<std::optional<Layout>> pred = {Layout{}};
  MCX_ASSIGN_OR_RETURN(PartitionedRegion cond,
                       partition_region(instr, "cond", *c.cond, mesh,
                                        concat(carries, ops.subspan(c.num_carry, c.num_cond_consts)), pred, &plan.stats));
  MCX_ASSIGN_OR_RETURN(PartitionedRegion body,
                       partition_region(instr, "body", *c.body, mesh,
                                        concat(carries, ops.subspan(c.num_carry + c.num_cond_consts)), forced(carries),
                                        &plan.stats));
  c.cond = cond.program;
  c.body = body.program;
  plan.results.assign(carries.begin(), carries.end());
  plan.attrs = ir::while_attrs(c);
  return plan;
}

absl::StatusOr<RegionOpPlan> plan_cond(const ir::Instr& instr, std::span<const Layout> ops, const MeshAxes& mesh) {
  MCX_ASSIGN_OR_RETURN(ir::CondConfig c, ir::get_cond_config(instr.attrs, ops.size()));
  RegionOpPlan plan;
  plan.operands.assign(ops.begin(), ops.end());
  const int n = c.num_operands(ops.size());
  const std::span<const Layout> shared = ops.subspan(1, n);
  size_t at = 1 + n;
  for (size_t b = 0; b < c.branches.size(); ++b) {
    const std::span<const Layout> consts = ops.subspan(at, c.branch_consts[b]);
    at += c.branch_consts[b];
    std::vector<std::optional<Layout>> want(c.branches[b]->results.size());  // branch 0: propagated
    if (b > 0) want = forced(plan.results);
    MCX_ASSIGN_OR_RETURN(PartitionedRegion branch, partition_region(instr, cat("branch ", b), *c.branches[b], mesh,
                                                                    concat(shared, consts), want, &plan.stats));
    if (b == 0) plan.results = branch.results;
    c.branches[b] = branch.program;
  }
  plan.attrs = ir::cond_attrs(c);
  return plan;
}

}  // namespace

void add_stats(PartitionStats& into, PartitionStats from, const std::string& note_suffix) {
  into.all_reduces += from.all_reduces;
  into.all_gathers += from.all_gathers;
  into.all_to_alls += from.all_to_alls;
  into.local_slices += from.local_slices;
  into.fallback_gathers += from.fallback_gathers;
  for (std::string& note : from.notes) into.notes.push_back(note + note_suffix);
}

absl::StatusOr<RegionOpPlan> plan_region_op(const ir::Program& global, int index,
                                            std::span<const Layout> operand_layouts, const MeshAxes& mesh) {
  const ir::Instr& instr = global.instrs[index];
  switch (instr.kind) {
    case OpKind::kScan: return plan_scan(instr, operand_layouts, mesh);
    case OpKind::kWhile: return plan_while(instr, operand_layouts, mesh);
    case OpKind::kCond: return plan_cond(instr, operand_layouts, mesh);
    default: break;
  }
  return absl::InternalError(cat("[partition] ", ir::op_name(instr.kind), " %", global.num_params() + index,
                                 " has no partitioning rule for its regions (custom-rule calls are inlined first)"));
}

}  // namespace mcx::spmd::internal
