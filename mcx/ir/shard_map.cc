#include "mcx/ir/shard_map.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/control_flow_autodiff.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
using internal::op_error;
using internal::with_op_prefix;
namespace {

constexpr std::string_view kName = "shard_map";

std::string spec_str(const SpecAxes& spec) {
  std::string out = "[";
  for (size_t d = 0; d < spec.size(); ++d) out += cat(d ? ", " : "", "{", internal::join(spec[d], ","), "}");
  return out + "]";
}

void encode(const SpecAxes& spec, std::vector<int64_t>& out) {
  for (const std::vector<int>& axes : spec) {
    out.push_back(static_cast<int64_t>(axes.size()));
    for (int a : axes) out.push_back(a);
  }
}

// Decodes one spec per rank from `encoded`, starting at *at; `what` names the values ("operand", "result").
absl::StatusOr<std::vector<SpecAxes>> decode(std::span<const int64_t> encoded, std::span<const int> ranks,
                                             size_t mesh_rank, std::string_view attr, std::string_view what) {
  std::vector<SpecAxes> specs;
  size_t at = 0;
  for (size_t v = 0; v < ranks.size(); ++v) {
    SpecAxes spec;
    std::vector<bool> used(mesh_rank, false);
    for (int d = 0; d < ranks[v]; ++d) {
      if (at >= encoded.size())
        return op_error(kName, "attribute '", attr, "' ends inside the spec of ", what, " ", v, " (rank ", ranks[v], ")");
      const int64_t n = encoded[at++];
      if (n < 0 || n > static_cast<int64_t>(mesh_rank) || at + static_cast<size_t>(n) > encoded.size())
        return op_error(kName, "attribute '", attr, "': ", what, " ", v, " dimension ", d, " has axis count ", n,
                        ", expected 0..", mesh_rank, " with that many axis indices following");
      std::vector<int> axes;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t a = encoded[at++];
        if (a < 0 || a >= static_cast<int64_t>(mesh_rank))
          return op_error(kName, "attribute '", attr, "': ", what, " ", v, " names mesh axis ", a, ", the mesh has ",
                          mesh_rank, " axes");
        if (used[a]) return op_error(kName, "attribute '", attr, "': ", what, " ", v, " names mesh axis ", a, " twice");
        used[a] = true;
        axes.push_back(static_cast<int>(a));
      }
      spec.push_back(std::move(axes));
    }
    specs.push_back(std::move(spec));
  }
  if (at != encoded.size())
    return op_error(kName, "attribute '", attr, "' has ", encoded.size() - at, " values after the last ", what,
                    "'s spec");
  return specs;
}

std::vector<int> ranks_of(std::span<const AbstractValue> types) {
  std::vector<int> out;
  for (const AbstractValue& t : types) out.push_back(t.rank());
  return out;
}

}  // namespace

Attrs shard_map_attrs(const ShardMapConfig& c) {
  std::vector<int64_t> in, out;
  for (const SpecAxes& s : c.in_specs) encode(s, in);
  for (const SpecAxes& s : c.out_specs) encode(s, out);
  return Attrs{{"regions", Regions{c.body}},
               {"mesh_shape", c.mesh_shape},
               {"in_specs", std::move(in)},
               {"out_specs", std::move(out)},
               {"result", int64_t{c.result}}};
}

absl::StatusOr<ShardMapConfig> get_shard_map_config(const Attrs& attrs, std::span<const AbstractValue> operands) {
  ShardMapConfig c;
  auto regions = attrs.get_regions("regions");
  if (!regions.ok()) return with_op_prefix(kName, regions.status());
  if (regions->size() != 1 || (*regions)[0] == nullptr)
    return op_error(kName, "attribute 'regions' must hold the body, found ", regions->size(), " programs");
  c.body = (*regions)[0];
  auto mesh = attrs.get_ints("mesh_shape");
  if (!mesh.ok()) return with_op_prefix(kName, mesh.status());
  c.mesh_shape = *std::move(mesh);
  if (c.mesh_shape.empty()) return op_error(kName, "attribute 'mesh_shape' is empty, expected the mesh's axis sizes");
  int64_t devices = 1;
  for (int64_t s : c.mesh_shape) {
    if (s < 1) return op_error(kName, "attribute 'mesh_shape' has the axis size ", s, ", expected >= 1");
    // Partition ids are i32 (op.h axis_index); the bound also keeps the products below from overflowing.
    if (s > std::numeric_limits<int32_t>::max() / devices)
      return op_error(kName, "attribute 'mesh_shape' [", internal::join(c.mesh_shape, ", "),
                      "] has more than 2^31-1 devices");
    devices *= s;
  }
  if (c.body->num_params() != static_cast<int>(operands.size()))
    return op_error(kName, "the body takes ", c.body->num_params(), " parameters, found ", operands.size(), " operands");
  auto in = attrs.get_ints("in_specs");
  if (!in.ok()) return with_op_prefix(kName, in.status());
  MCX_ASSIGN_OR_RETURN(c.in_specs, decode(*in, ranks_of(operands), c.mesh_shape.size(), "in_specs", "operand"));
  auto out = attrs.get_ints("out_specs");
  if (!out.ok()) return with_op_prefix(kName, out.status());
  MCX_ASSIGN_OR_RETURN(c.out_specs, decode(*out, ranks_of(c.body->result_types()), c.mesh_shape.size(), "out_specs",
                                           "result"));
  auto result = attrs.get_int("result");
  if (!result.ok()) return with_op_prefix(kName, result.status());
  if (*result < 0 || *result >= static_cast<int64_t>(c.body->results.size()))
    return op_error(kName, "attribute 'result' is ", *result, ", expected a result index in [0, ",
                    c.body->results.size(), ")");
  c.result = static_cast<int>(*result);
  return c;
}

int64_t spec_shards(const SpecAxes& spec, std::span<const int64_t> mesh_shape, int d) {
  int64_t n = 1;
  for (int a : spec[d]) n *= mesh_shape[a];
  return n;
}

std::vector<int> unnamed_axes(const SpecAxes& spec, std::span<const int64_t> mesh_shape) {
  std::vector<bool> named(mesh_shape.size(), false);
  for (const std::vector<int>& axes : spec)
    for (int a : axes) named[a] = true;
  std::vector<int> out;
  for (size_t a = 0; a < mesh_shape.size(); ++a)
    if (!named[a] && mesh_shape[a] > 1) out.push_back(static_cast<int>(a));
  return out;
}

std::vector<std::vector<int64_t>> mesh_axis_groups(std::span<const int64_t> mesh_shape, std::span<const int> axes) {
  const int rank = static_cast<int>(mesh_shape.size());
  int64_t n = 1;
  for (int64_t s : mesh_shape) n *= s;
  std::vector<bool> in_group(rank, false);
  for (int a : axes) in_group[a] = true;
  // Key: the position with the grouped coordinates zeroed; groups ordered by their smallest member.
  std::map<int64_t, size_t> group_of_key;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> groups;  // (rank in group, position)
  std::vector<int64_t> stride(rank, 1);
  for (int a = rank - 2; a >= 0; --a) stride[a] = stride[a + 1] * mesh_shape[a + 1];
  std::vector<int64_t> coords(rank);
  for (int64_t p = 0; p < n; ++p) {
    for (int a = 0; a < rank; ++a) coords[a] = (p / stride[a]) % mesh_shape[a];
    int64_t rank_in_group = 0;
    for (int a : axes) rank_in_group = rank_in_group * mesh_shape[a] + coords[a];
    int64_t key = 0;
    for (int a = 0; a < rank; ++a) key = key * mesh_shape[a] + (in_group[a] ? 0 : coords[a]);
    auto [it, inserted] = group_of_key.emplace(key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].emplace_back(rank_in_group, p);
  }
  std::vector<std::vector<int64_t>> out;
  out.reserve(groups.size());
  for (auto& g : groups) {
    std::sort(g.begin(), g.end());
    std::vector<int64_t> members;
    members.reserve(g.size());
    for (const auto& [r, p] : g) members.push_back(p);
    out.push_back(std::move(members));
  }
  return out;
}

absl::StatusOr<std::vector<AbstractValue>> shard_map_result_types(std::span<const AbstractValue> operands,
                                                                  const Attrs& attrs) {
  MCX_ASSIGN_OR_RETURN(ShardMapConfig c, get_shard_map_config(attrs, operands));
  for (size_t i = 0; i < operands.size(); ++i) {
    const AbstractValue& t = operands[i];
    Shape local;
    for (int d = 0; d < t.rank(); ++d) {
      const int64_t n = spec_shards(c.in_specs[i], c.mesh_shape, d);
      if (n == 1) {
        local.push_back(t.shape[d]);
        continue;
      }
      const std::optional<int64_t> size = t.shape[d].constant_value();
      if (!size)
        return op_error(kName, "operand ", i, " (", t.to_string(), ") dimension ", d, " is symbolic and split over ",
                        n, " devices (mesh axes ", spec_str({c.in_specs[i][d]}), "); split dimensions must be static");
      if (*size % n != 0)
        return op_error(kName, "operand ", i, " (", t.to_string(), ") dimension ", d, " (", *size,
                        ") is not divisible by the ", n, " devices of mesh axes ", spec_str({c.in_specs[i][d]}));
      local.push_back(DimExpr(*size / n));
    }
    const AbstractValue want{t.dtype, std::move(local)};
    if (c.body->params[i] != want)
      return op_error(kName, "body parameter ", i, " is ", c.body->params[i].to_string(), ", expected ",
                      want.to_string(), " (operand ", t.to_string(), " split as ", spec_str(c.in_specs[i]), ")");
  }
  std::vector<AbstractValue> results;
  for (size_t r = 0; r < c.body->results.size(); ++r) {
    if (c.body->results[r] < 0 || c.body->results[r] >= c.body->num_values())
      return op_error(kName, "body result ", r, " refers to %", c.body->results[r], ", but it has ",
                      c.body->num_values(), " values");
    AbstractValue t = c.body->type(c.body->results[r]);
    for (int d = 0; d < t.rank(); ++d) {
      const int64_t n = spec_shards(c.out_specs[r], c.mesh_shape, d);
      if (n > 1) t.shape[d] = t.shape[d] * DimExpr(n);
    }
    results.push_back(std::move(t));
  }
  return results;
}

namespace internal {
namespace {

ShardMapConfig config_of(const Instr& instr, const ProgramBuilder& b, std::span<const ValueId> operands) {
  std::vector<AbstractValue> types;
  for (ValueId v : operands) types.push_back(b.type(v));
  return value_or_throw(get_shard_map_config(instr.attrs, types));
}

std::vector<ValueId> emit_shard_map(ProgramBuilder& b, const ShardMapConfig& c, std::span<const ValueId> operands) {
  return emit_siblings(b, OpKind::kShardMap, shard_map_attrs(c), operands, static_cast<int>(c.body->results.size()));
}

// x summed over the devices along mesh axes `axes` (all_reduce sum; x itself when there are none).
ValueId sum_over_axes(ProgramBuilder& b, ValueId x, std::span<const int64_t> mesh_shape, std::span<const int> axes) {
  if (axes.empty()) return x;
  std::vector<std::vector<int64_t>> groups = mesh_axis_groups(mesh_shape, axes);
  std::vector<int64_t> flat;
  for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
  const int64_t size = static_cast<int64_t>(groups.front().size());
  return b.emit_or_throw(OpKind::kAllReduce, {x},
                         Attrs{{"reduce", int64_t{0}}, {"replica_groups", std::move(flat)}, {"group_size", size}});
}

int64_t copies(const SpecAxes& spec, std::span<const int64_t> mesh_shape) {
  int64_t n = 1;
  for (int a : unnamed_axes(spec, mesh_shape)) n *= mesh_shape[a];
  return n;
}

SpecAxes with_leading_unsplit(SpecAxes spec) {
  spec.insert(spec.begin(), std::vector<int>{});
  return spec;
}

}  // namespace

std::vector<ValueId> emit_shard_map_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                        std::span<const std::optional<ValueId>> result_cts,
                                        const std::vector<bool>& needed) {
  const ShardMapConfig fwd = config_of(instr, b, operands);
  const Program& body = *fwd.body;
  const std::vector<AbstractValue> out_types = body.result_types();
  std::vector<int> wrt;  // the floating operands whose cotangents are needed
  for (int i = 0; i < body.num_params(); ++i)
    if (needed[i] && is_floating(body.params[i].dtype)) wrt.push_back(i);
  std::vector<ValueId> contributions(operands.size(), -1);
  if (wrt.empty()) return contributions;
  std::vector<int> fy;  // the floating results (the others have no cotangent)
  for (size_t r = 0; r < out_types.size(); ++r)
    if (is_floating(out_types[r].dtype)) fy.push_back(static_cast<int>(r));

  // (local operands..., local cotangents of the floating results...) -> local cotangents of wrt.
  ProgramBuilder bb(body.name + "_vjp", body.scope);
  std::vector<ValueId> args;
  for (const AbstractValue& t : body.params) args.push_back(bb.add_parameter(t));
  std::vector<ValueId> cts;
  for (size_t r = 0, f = 0; r < out_types.size(); ++r) {
    if (f < fy.size() && fy[f] == static_cast<int>(r)) {
      ++f;
      ValueId ct = bb.add_parameter(out_types[r]);
      const int64_t n = copies(fwd.out_specs[r], fwd.mesh_shape);
      // Each of the n devices holding a copy of the result receives an equal share of its cotangent.
      cts.push_back(n > 1 ? bb.binary(OpKind::kMul, ct, bb.full_like(ct, 1.0 / static_cast<double>(n))) : ct);
    } else {
      cts.push_back(zeros_of(bb, out_types[r]));
    }
  }
  std::vector<ValueId> vjp_args = args;
  vjp_args.insert(vjp_args.end(), cts.begin(), cts.end());
  const std::vector<ValueId> v = value_or_throw(inline_program(bb, drop_side_effects(value_or_throw(vjp_program(body, wrt))), vjp_args));
  std::vector<ValueId> grads;
  for (size_t j = 0; j < wrt.size(); ++j)
    grads.push_back(sum_over_axes(bb, v[out_types.size() + j], fwd.mesh_shape,
                                  unnamed_axes(fwd.in_specs[wrt[j]], fwd.mesh_shape)));
  Program bwd_body = eliminate_dead_code(std::move(bb).build(std::move(grads)));

  ShardMapConfig bwd;
  bwd.mesh_shape = fwd.mesh_shape;
  bwd.in_specs = fwd.in_specs;
  std::vector<ValueId> ops(operands.begin(), operands.end());
  std::vector<AbstractValue> operand_types;
  for (ValueId o : operands) operand_types.push_back(b.type(o));
  const std::vector<AbstractValue> global = value_or_throw(shard_map_result_types(operand_types, instr.attrs));
  for (int r : fy) {
    bwd.in_specs.push_back(fwd.out_specs[r]);
    ops.push_back(result_cts[r] ? *result_cts[r] : zeros_of(b, global[r]));
  }
  for (int i : wrt) bwd.out_specs.push_back(fwd.in_specs[i]);
  bwd.body = std::make_shared<const Program>(std::move(bwd_body));
  const std::vector<ValueId> out = emit_shard_map(b, bwd, ops);
  for (size_t j = 0; j < wrt.size(); ++j) contributions[wrt[j]] = out[j];
  return contributions;
}

std::vector<ValueId> emit_shard_map_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                        std::span<const ValueId> tangents) {
  const ShardMapConfig fwd = config_of(instr, b, operands);
  const Program& body = *fwd.body;
  const std::vector<AbstractValue> out_types = body.result_types();
  const int nr = static_cast<int>(out_types.size());
  std::vector<int> wrt;
  for (int i = 0; i < body.num_params(); ++i)
    if (is_floating(body.params[i].dtype)) wrt.push_back(i);
  std::vector<ValueId> result_tangents(nr, -1);
  std::vector<int> fy;
  for (int r = 0; r < nr; ++r)
    if (is_floating(out_types[r].dtype)) fy.push_back(r);
  if (wrt.empty() || fy.empty()) return result_tangents;

  // (local operands..., local tangents of the floating operands...) -> local tangents of the floating results.
  ProgramBuilder bb(body.name + "_jvp", body.scope);
  std::vector<ValueId> args;
  for (const AbstractValue& t : body.params) args.push_back(bb.add_parameter(t));
  for (int i : wrt) args.push_back(bb.add_parameter(body.params[i]));
  const std::vector<ValueId> v = value_or_throw(inline_program(bb, drop_side_effects(value_or_throw(jvp_program(body, wrt))), args));
  std::vector<ValueId> results;
  for (int r : fy) results.push_back(v[nr + r]);

  ShardMapConfig jvp;
  jvp.mesh_shape = fwd.mesh_shape;
  jvp.in_specs = fwd.in_specs;
  std::vector<ValueId> ops(operands.begin(), operands.end());
  for (int i : wrt) {
    jvp.in_specs.push_back(fwd.in_specs[i]);
    ops.push_back(tangents[i] >= 0 ? tangents[i] : b.full_like(operands[i], 0.0));
  }
  for (int r : fy) jvp.out_specs.push_back(fwd.out_specs[r]);
  jvp.body = std::make_shared<const Program>(std::move(bb).build(std::move(results)));
  const std::vector<ValueId> out = emit_shard_map(b, jvp, ops);
  for (size_t k = 0; k < fy.size(); ++k) result_tangents[fy[k]] = out[k];
  return result_tangents;
}

std::vector<ValueId> emit_shard_map_batching(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                             const std::vector<bool>& batched, const DimExpr& size) {
  // The specs are decoded with the operands' unbatched types, then the batch dimension is added to the
  // batched operands' specs and to every result's.
  std::vector<AbstractValue> unbatched;
  for (size_t i = 0; i < operands.size(); ++i) {
    AbstractValue t = b.type(operands[i]);
    if (batched[i]) t.shape.erase(t.shape.begin());
    unbatched.push_back(std::move(t));
  }
  ShardMapConfig c = value_or_throw(get_shard_map_config(instr.attrs, unbatched));
  c.body = std::make_shared<const Program>(value_or_throw(vmap_program(*c.body, batched, size)));
  for (size_t i = 0; i < c.in_specs.size(); ++i)
    if (batched[i]) c.in_specs[i] = with_leading_unsplit(std::move(c.in_specs[i]));
  for (SpecAxes& s : c.out_specs) s = with_leading_unsplit(std::move(s));
  return emit_shard_map(b, c, operands);
}

}  // namespace internal
}  // namespace mcx::ir
