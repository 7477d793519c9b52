// The partitioner's driver: checks the inputs, walks the global program in order, asks the rules
// (propagation.h) for each instruction's layouts, reshards operands (reshard.h), emits the local op and
// the all_reduce of partial results, and finally reshards the results to the requested out_specs.
#include "mcx/spmd/partitioner.h"

#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shard_map.h"
#include "mcx/ir/str_util.h"
#include "mcx/spmd/layout.h"
#include "mcx/spmd/propagation.h"
#include "mcx/spmd/region_partition.h"
#include "mcx/spmd/reshard.h"

namespace mcx::spmd {
namespace {

using internal::Layout;
using ir::internal::cat;
using ir::OpKind;

absl::Status check_program(const ir::Program& global, const MeshAxes& mesh) {
  if (mesh.names.size() != mesh.sizes.size())
    return absl::InvalidArgumentError(cat("[partition] mesh has ", mesh.names.size(), " axis names but ",
                                          mesh.sizes.size(), " sizes"));
  for (size_t i = 0; i < mesh.sizes.size(); ++i)
    if (mesh.sizes[i] < 1)
      return absl::InvalidArgumentError(cat("[partition] mesh axis '", mesh.names[i], "' has size ",
                                            mesh.sizes[i], ", expected >= 1"));
  for (ir::ValueId v = 0; v < global.num_values(); ++v) {
    const AbstractValue& t = global.type(v);
    if (!is_static(t.shape))
      return absl::InvalidArgumentError(cat("[partition] value %", v, " of program @", global.name, " has type ",
                                            t.to_string(), "; the partitioner needs static shapes"));
    for (const DimExpr& d : t.shape)
      if (*d.constant_value() > std::numeric_limits<int32_t>::max())
        return absl::InvalidArgumentError(cat("[partition] value %", v, " has type ", t.to_string(),
                                              "; dimensions above 2^31-1 are not supported (i32 offsets)"));
  }
  for (size_t i = 0; i < global.instrs.size(); ++i) {
    OpKind k = global.instrs[i].kind;
    if (ir::is_collective(k) || k == OpKind::kAxisIndex)
      return absl::InvalidArgumentError(cat("[partition] instruction %", global.num_params() + static_cast<int>(i),
                                            " is ", ir::op_name(k),
                                            "; a global program must not contain collectives or axis_index"));
  }
  return absl::OkStatus();
}

class Partitioner {
 public:
  Partitioner(const ir::Program& global, const MeshAxes& mesh)
      : g_(global), mesh_(mesh), b_(global.name, global.scope), em_(b_, mesh_, stats_) {}

  absl::StatusOr<PartitionedProgram> run(std::span<const PartitionSpec> in_specs,
                                         std::span<const std::optional<PartitionSpec>> out_specs);

 private:
  // The local value of global value v laid out as `to` (cached per (v, layout)).
  absl::StatusOr<ir::ValueId> local_as(ir::ValueId v, const Layout& to);
  // A cheap producer (iota, broadcast_in_dim) of a replicated value emitted again directly in layout `to`,
  // instead of slicing its global-size result: no full-size temporary.
  // nullopt when v's producer is not one of those or `to` splits a dimension that needs offsets.
  absl::StatusOr<std::optional<ir::ValueId>> rematerialize(ir::ValueId v, const Layout& to);
  absl::Status partition_instr(int index);
  absl::Status sharding_constraint(int index);
  // An op with regions (region_partition.h): its sibling group is partitioned at its first sibling.
  absl::Status partition_region_op(int index);
  // shard_map: its operands resharded to its in_specs, its (per-device) body inlined; at its first sibling.
  absl::Status partition_shard_map(int index);
  // debug_print: its operands gathered whole (it prints global values, on the partition its attribute names).
  absl::Status debug_print(int index);
  // The local value and layout of sibling `index` from its group's partitioned results.
  absl::Status take_group_result(int index);
  // Internal unless `local` (the per-device value of global value v) has v's local type under `layout`.
  absl::Status check_local_type(ir::ValueId v, ir::ValueId local, const Layout& layout) const;

  const ir::Program& g_;
  const MeshAxes& mesh_;
  PartitionStats stats_;
  ir::ProgramBuilder b_;
  internal::Emitter em_;
  std::vector<Layout> layout_;        // per global value: its layout
  std::vector<ir::ValueId> local_;    // per global value: its local value in that layout
  std::map<std::pair<ir::ValueId, Layout>, ir::ValueId> resharded_;
  std::vector<int> group_first_;  // per instruction: its sibling group's first (-1: no regions)
  struct Group {
    std::vector<ir::ValueId> locals;
    std::vector<Layout> layouts;
  };
  std::map<int, Group> groups_;  // first sibling -> every result of the partitioned group
};

absl::StatusOr<ir::ValueId> Partitioner::local_as(ir::ValueId v, const Layout& to) {
  if (layout_[v] == to) return local_[v];
  auto key = std::make_pair(v, to);
  if (auto it = resharded_.find(key); it != resharded_.end()) return it->second;
  MCX_ASSIGN_OR_RETURN(std::optional<ir::ValueId> remat, rematerialize(v, to));
  ir::ValueId r;
  if (remat) {
    r = *remat;
  } else {
    MCX_ASSIGN_OR_RETURN(r, em_.reshard(local_[v], internal::static_dims(g_, v), layout_[v], to));
  }
  resharded_.emplace(std::move(key), r);
  return r;
}

absl::StatusOr<std::optional<ir::ValueId>> Partitioner::rematerialize(ir::ValueId v, const Layout& to) {
  if (g_.is_param(v)) return std::nullopt;
  const ir::Instr& in = g_.defining_instr(v);
  if (in.kind != OpKind::kIota && in.kind != OpKind::kBroadcastInDim) return std::nullopt;
  for (const internal::AxisList& axes : layout_[v]) {
    if (!axes.empty()) return std::nullopt;  // only replicated producers are re-emitted
  }
  const std::vector<int64_t> dims = internal::static_dims(g_, v);
  const Shape local = concrete_shape(internal::local_dims(to, mesh_, dims));
  ir::Attrs attrs = in.attrs;
  attrs.set("shape", local);
  if (in.kind == OpKind::kIota) {
    MCX_ASSIGN_OR_RETURN(int64_t counting, in.attrs.get_int("dimension"));
    if (!to[counting].empty()) return std::nullopt;  // its values depend on the offset
    MCX_ASSIGN_OR_RETURN(ir::ValueId r, b_.emit(OpKind::kIota, {}, std::move(attrs)));
    return r;
  }
  // broadcast_in_dim: the operand takes the split of the result dimensions it maps to (it is never larger
  // than the result, so moving it costs at most what slicing the result would) and is broadcast locally.
  const ir::ValueId x = in.operands[0];
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> bd, in.attrs.get_ints("broadcast_dimensions"));
  const std::vector<int64_t> xdims = internal::static_dims(g_, x);
  Layout x_to(xdims.size());
  for (size_t i = 0; i < bd.size(); ++i) {
    if (xdims[i] != 1) x_to[i] = to[bd[i]];  // a size-1 operand dimension is broadcast, never split
  }
  MCX_ASSIGN_OR_RETURN(ir::ValueId local_x, local_as(x, x_to));
  MCX_ASSIGN_OR_RETURN(ir::ValueId r, b_.emit(OpKind::kBroadcastInDim, {local_x}, std::move(attrs)));
  return r;
}

absl::Status Partitioner::sharding_constraint(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const ir::ValueId self = g_.num_params() + index;
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> encoded, instr.attrs.get_ints("sharding"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> mesh_shape, instr.attrs.get_ints("mesh_shape"));
  if (mesh_shape != mesh_.sizes)
    return absl::InvalidArgumentError(cat("[partition] sharding_constraint %", self, " was made for mesh shape [",
                                          ir::internal::join(mesh_shape, ", "), "], partitioning for mesh ",
                                          mesh_.to_string()));
  MCX_ASSIGN_OR_RETURN(PartitionSpec spec, decode_spec(encoded, mesh_));
  std::vector<int64_t> dims = internal::static_dims(g_, self);
  MCX_RETURN_IF_ERROR(validate_spec(spec, mesh_, dims, "sharding_constraint", /*allow_unconstrained=*/true));
  std::vector<bool> unconstrained;
  Layout want = internal::layout_from_spec(spec, mesh_, static_cast<int>(dims.size()), &unconstrained);
  ir::ValueId x = instr.operands[0];
  Layout target = internal::fill_unconstrained(want, unconstrained, layout_[x], mesh_, dims);
  MCX_ASSIGN_OR_RETURN(local_[self], local_as(x, target));
  layout_[self] = target;
  return absl::OkStatus();
}

absl::Status Partitioner::check_local_type(ir::ValueId v, ir::ValueId local, const Layout& layout) const {
  const std::vector<int64_t> want = internal::local_dims(layout, mesh_, internal::static_dims(g_, v));
  const AbstractValue expected{g_.type(v).dtype, concrete_shape(want)};
  if (b_.type(local) == expected) return absl::OkStatus();
  return absl::InternalError(cat("[partition] ", ir::op_name(g_.defining_instr(v).kind), " %", v, ": local op has type ",
                                 b_.type(local).to_string(), ", expected ", expected.to_string(), " for layout ",
                                 internal::layout_to_string(layout, mesh_)));
}

absl::Status Partitioner::partition_region_op(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const int first = group_first_[index];
  if (first == index) {
    std::vector<Layout> in;
    for (ir::ValueId v : instr.operands) in.push_back(layout_[v]);
    MCX_ASSIGN_OR_RETURN(internal::RegionOpPlan plan, internal::plan_region_op(g_, index, in, mesh_));
    std::vector<ir::ValueId> operands;
    for (size_t k = 0; k < instr.operands.size(); ++k) {
      MCX_ASSIGN_OR_RETURN(ir::ValueId o, local_as(instr.operands[k], plan.operands[k]));
      operands.push_back(o);
    }
    Group group;
    for (size_t r = 0; r < plan.results.size(); ++r) {
      MCX_ASSIGN_OR_RETURN(ir::ValueId local,
                           b_.emit(instr.kind, operands, ir::with_result_index(plan.attrs, static_cast<int>(r))));
      group.locals.push_back(local);
    }
    group.layouts = std::move(plan.results);
    internal::add_stats(stats_, std::move(plan.stats));
    groups_[first] = std::move(group);
  }
  return take_group_result(index);
}

absl::Status Partitioner::partition_shard_map(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const int first = group_first_[index];
  if (first == index) {
    std::vector<AbstractValue> types;
    for (ir::ValueId v : instr.operands) types.push_back(g_.type(v));
    MCX_ASSIGN_OR_RETURN(ir::ShardMapConfig c, ir::get_shard_map_config(instr.attrs, types));
    if (c.mesh_shape != mesh_.sizes)
      return absl::InvalidArgumentError(cat("[partition] shard_map %", g_.num_params() + index,
                                            " was made for a mesh of shape [", ir::internal::join(c.mesh_shape, ", "),
                                            "], partitioning for mesh ", mesh_.to_string(),
                                            " (one computation runs on one mesh)"));
    auto layout_of = [&](const ir::SpecAxes& spec) {
      Layout l(spec.size());
      for (size_t d = 0; d < spec.size(); ++d)
        for (int a : spec[d])
          if (mesh_.sizes[a] > 1) l[d].push_back(a);  // size-1 axes split nothing (layout.h)
      return l;
    };
    std::vector<ir::ValueId> operands;
    for (size_t k = 0; k < instr.operands.size(); ++k) {
      MCX_ASSIGN_OR_RETURN(ir::ValueId o, local_as(instr.operands[k], layout_of(c.in_specs[k])));
      operands.push_back(o);
    }
    Group group;
    MCX_ASSIGN_OR_RETURN(group.locals, ir::inline_program(b_, *c.body, operands));
    for (const ir::SpecAxes& spec : c.out_specs) group.layouts.push_back(layout_of(spec));
    groups_[first] = std::move(group);
  }
  return take_group_result(index);
}

absl::Status Partitioner::debug_print(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const ir::ValueId self = g_.num_params() + index;
  std::vector<ir::ValueId> operands;
  for (ir::ValueId v : instr.operands) {
    MCX_ASSIGN_OR_RETURN(ir::ValueId o, local_as(v, internal::replicated(g_.type(v).rank())));
    operands.push_back(o);
  }
  MCX_ASSIGN_OR_RETURN(local_[self], b_.emit(instr.kind, std::move(operands), instr.attrs));
  layout_[self] = internal::replicated(0);
  return absl::OkStatus();
}

absl::Status Partitioner::take_group_result(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const ir::ValueId self = g_.num_params() + index;
  const Group& group = groups_.at(group_first_[index]);
  const size_t r = static_cast<size_t>(ir::result_index(instr));
  local_[self] = group.locals.at(r);
  layout_[self] = group.layouts.at(r);
  return check_local_type(self, local_[self], layout_[self]);
}

absl::Status Partitioner::partition_instr(int index) {
  const ir::Instr& instr = g_.instrs[index];
  const ir::ValueId self = g_.num_params() + index;
  if (instr.kind == OpKind::kShardingConstraint) return sharding_constraint(index);
  if (instr.kind == OpKind::kShardMap) return partition_shard_map(index);
  if (instr.kind == OpKind::kDebugPrint) return debug_print(index);
  if (ir::has_regions(instr.kind)) return partition_region_op(index);
  std::vector<Layout> in;
  for (ir::ValueId v : instr.operands) in.push_back(layout_[v]);
  MCX_ASSIGN_OR_RETURN(internal::OpPlan plan, internal::plan_instr(g_, index, in, mesh_));
  for (const std::string& why : plan.fallbacks) {
    ++stats_.fallback_gathers;
    stats_.notes.push_back(cat("[partition] ", ir::op_name(instr.kind), " %", self, ": ", why));
  }
  std::vector<ir::ValueId> operands;
  for (size_t k = 0; k < instr.operands.size(); ++k) {
    MCX_ASSIGN_OR_RETURN(ir::ValueId o, local_as(instr.operands[k], plan.operands[k]));
    operands.push_back(o);
  }
  MCX_ASSIGN_OR_RETURN(ir::ValueId local, b_.emit(instr.kind, std::move(operands), plan.attrs));
  MCX_RETURN_IF_ERROR(check_local_type(self, local, plan.result));
  // Partial results are all-reduced at once: no consumer ever sees a partial value.
  MCX_ASSIGN_OR_RETURN(local_[self], em_.all_reduce(local, plan.reduce_axes, plan.reduce_op));
  layout_[self] = plan.result;
  return absl::OkStatus();
}

absl::StatusOr<PartitionedProgram> Partitioner::run(std::span<const PartitionSpec> in_specs,
                                                    std::span<const std::optional<PartitionSpec>> out_specs) {
  MCX_RETURN_IF_ERROR(check_program(g_, mesh_));
  if (static_cast<int>(in_specs.size()) != g_.num_params())
    return absl::InvalidArgumentError(cat("[partition] program @", g_.name, " has ", g_.num_params(),
                                          " parameters, got ", in_specs.size(), " in_specs"));
  if (!out_specs.empty() && out_specs.size() != g_.results.size())
    return absl::InvalidArgumentError(cat("[partition] program @", g_.name, " has ", g_.results.size(),
                                          " results, got ", out_specs.size(), " out_specs (expected 0 or ",
                                          g_.results.size(), ")"));
  layout_.assign(g_.num_values(), Layout{});
  local_.assign(g_.num_values(), -1);
  group_first_ = ir::sibling_group_firsts(g_);
  for (int p = 0; p < g_.num_params(); ++p) {
    std::vector<int64_t> dims = internal::static_dims(g_, p);
    MCX_RETURN_IF_ERROR(validate_spec(in_specs[p], mesh_, dims, cat("partition: in_specs[", p, "]")));
    layout_[p] = internal::layout_from_spec(in_specs[p], mesh_, static_cast<int>(dims.size()));
    local_[p] = b_.add_parameter(AbstractValue{g_.params[p].dtype,
                                               concrete_shape(internal::local_dims(layout_[p], mesh_, dims))});
  }
  for (int i = 0; i < static_cast<int>(g_.instrs.size()); ++i) MCX_RETURN_IF_ERROR(partition_instr(i));

  PartitionedProgram out;
  std::vector<ir::ValueId> results;
  for (size_t r = 0; r < g_.results.size(); ++r) {
    ir::ValueId v = g_.results[r];
    std::vector<int64_t> dims = internal::static_dims(g_, v);
    Layout target = layout_[v];
    if (!out_specs.empty() && out_specs[r].has_value()) {
      MCX_RETURN_IF_ERROR(validate_spec(*out_specs[r], mesh_, dims, cat("partition: out_specs[", r, "]"),
                                        /*allow_unconstrained=*/true));
      std::vector<bool> unconstrained;
      Layout want = internal::layout_from_spec(*out_specs[r], mesh_, static_cast<int>(dims.size()), &unconstrained);
      target = internal::fill_unconstrained(want, unconstrained, layout_[v], mesh_, dims);
      if (!out_specs[r]->has_unconstrained()) {
        out.out_specs.push_back(*out_specs[r]);
      } else {
        std::vector<DimSpec> resolved;
        for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
          DimSpec ds = out_specs[r]->dim(d);
          if (ds.unconstrained) ds = internal::spec_from_layout(Layout{target[d]}, mesh_).dim(0);
          resolved.push_back(std::move(ds));
        }
        while (!resolved.empty() && resolved.back().axes.empty()) resolved.pop_back();
        out.out_specs.push_back(PartitionSpec(std::move(resolved)));
      }
    } else {
      out.out_specs.push_back(internal::spec_from_layout(target, mesh_));
    }
    MCX_ASSIGN_OR_RETURN(ir::ValueId local, local_as(v, target));
    results.push_back(local);
  }
  // Producers replaced by rematerialize() (and reshards nobody used) are dropped.
  out.per_device = ir::eliminate_dead_code(std::move(b_).build(std::move(results)));
  out.in_specs.assign(in_specs.begin(), in_specs.end());
  out.stats = std::move(stats_);
  return out;
}

}  // namespace

absl::StatusOr<PartitionedProgram> partition(const ir::Program& global, const MeshAxes& mesh,
                                             std::span<const PartitionSpec> in_specs,
                                             std::span<const std::optional<PartitionSpec>> out_specs) {
  if (ir::has_custom_calls(global)) {  // their functions are partitioned like the rest of the program
    MCX_ASSIGN_OR_RETURN(ir::Program inlined, ir::inline_custom_calls(global));
    Partitioner p(inlined, mesh);
    return p.run(in_specs, out_specs);
  }
  Partitioner p(global, mesh);
  return p.run(in_specs, out_specs);
}

}  // namespace mcx::spmd
