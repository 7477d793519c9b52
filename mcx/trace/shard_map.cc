#include "mcx/trace/shard_map.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/reduce_op.h"
#include "mcx/ir/shard_map.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/runtime/spmd_executable.h"
#include "mcx/trace/control_flow.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"

namespace mcx {
namespace {

// The replica groups of a collective over `axes` of the enclosing shard_map's mesh.
struct Groups {
  const Mesh* mesh = nullptr;
  std::vector<int> axis_indices;
  int64_t group_size = 1;
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> flat;
};

Groups resolve_groups(const char* api, const AxisNames& axes) {
  const Mesh* mesh = detail::current_shard_map_mesh();
  const std::string names = absl::StrJoin(axes.names, ", ");
  if (mesh == nullptr || !in_trace()) {
    throw InvalidArgument(absl::StrCat("[", api, "] unbound axis name '", names,
                                       "': collectives must be called inside a shard_map body whose mesh has "
                                       "that axis"));
  }
  Groups g;
  g.mesh = mesh;
  if (axes.names.empty()) throw InvalidArgument(absl::StrCat("[", api, "] expected at least one axis name"));
  for (const std::string& name : axes.names) {
    int index = mesh->axes().index_of(name);
    if (index < 0) {
      throw InvalidArgument(absl::StrCat("[", api, "] unbound axis name '", name, "'; the shard_map mesh has axes ",
                                         mesh->axes().to_string()));
    }
    for (int seen : g.axis_indices) {
      if (seen == index) throw InvalidArgument(absl::StrCat("[", api, "] axis '", name, "' is named twice"));
    }
    g.axis_indices.push_back(index);
    g.group_size *= mesh->axes().sizes[index];
  }
  g.groups = axis_groups(mesh->axes(), g.axis_indices);
  for (const auto& group : g.groups) g.flat.insert(g.flat.end(), group.begin(), group.end());
  return g;
}

ir::Attrs group_attrs(const Groups& g) {
  ir::Attrs attrs;
  attrs.set("replica_groups", g.flat);
  attrs.set("group_size", g.group_size);
  return attrs;
}

Array all_reduce(const char* api, const Array& x, const AxisNames& axes, ReduceOp op) {
  Groups g = resolve_groups(api, axes);
  ir::Attrs attrs = group_attrs(g);
  attrs.set("reduce", static_cast<int64_t>(op));
  return bind(ir::OpKind::kAllReduce, {x}, std::move(attrs));
}

int normalize_axis(const char* api, int axis, int rank) {
  int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw InvalidArgument(absl::StrCat("[", api, "] axis ", axis, " is out of range for rank ", rank));
  }
  return a;
}

}  // namespace

Array psum(const Array& x, const AxisNames& axes) { return all_reduce("psum", x, axes, ReduceOp::kSum); }
Array pmax(const Array& x, const AxisNames& axes) { return all_reduce("pmax", x, axes, ReduceOp::kMax); }
Array pmin(const Array& x, const AxisNames& axes) { return all_reduce("pmin", x, axes, ReduceOp::kMin); }
Array pmean(const Array& x, const AxisNames& axes) {
  Groups g = resolve_groups("pmean", axes);
  return all_reduce("pmean", x, axes, ReduceOp::kSum) / static_cast<double>(g.group_size);
}

Array all_gather(const Array& x, const AxisNames& axes, int axis, bool tiled) {
  Groups g = resolve_groups("all_gather", axes);
  Array operand = x;
  int dim;
  if (tiled) {
    dim = normalize_axis("all_gather", axis, x.ndim());
  } else {
    dim = normalize_axis("all_gather", axis, x.ndim() + 1);
    operand = expand_dims(x, dim);
  }
  ir::Attrs attrs = group_attrs(g);
  attrs.set("dimension", static_cast<int64_t>(dim));
  return bind(ir::OpKind::kAllGather, {operand}, std::move(attrs));
}

Array psum_scatter(const Array& x, const AxisNames& axes, int scatter_dimension, bool tiled) {
  Groups g = resolve_groups("psum_scatter", axes);
  int dim = normalize_axis("psum_scatter", scatter_dimension, x.ndim());
  if (!tiled && !(x.shape()[dim] == DimExpr(g.group_size))) {
    throw InvalidArgument(absl::StrCat("[psum_scatter] with tiled=false dimension ", dim, " must equal the group size ",
                                       g.group_size, "; found ", x.aval().to_string()));
  }
  ir::Attrs attrs = group_attrs(g);
  attrs.set("dimension", static_cast<int64_t>(dim));
  attrs.set("reduce", static_cast<int64_t>(ReduceOp::kSum));
  Array out = bind(ir::OpKind::kReduceScatter, {x}, std::move(attrs));
  if (tiled) return out;
  Shape shape = out.shape();
  shape.erase(shape.begin() + dim);
  return reshape(out, shape);
}

Array all_to_all(const Array& x, const AxisNames& axes, int split_axis, int concat_axis) {
  Groups g = resolve_groups("all_to_all", axes);
  ir::Attrs attrs = group_attrs(g);
  attrs.set("split_dimension", static_cast<int64_t>(normalize_axis("all_to_all", split_axis, x.ndim())));
  attrs.set("concat_dimension", static_cast<int64_t>(normalize_axis("all_to_all", concat_axis, x.ndim())));
  return bind(ir::OpKind::kAllToAll, {x}, std::move(attrs));
}

Array ppermute(const Array& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm) {
  Groups g = resolve_groups("ppermute", axis);
  std::vector<int64_t> pairs;
  for (const auto& group : g.groups) {
    for (auto [src, dst] : perm) {
      if (src < 0 || src >= g.group_size || dst < 0 || dst >= g.group_size) {
        throw InvalidArgument(absl::StrCat("[ppermute] pair (", src, ", ", dst, ") is out of range for axis '", axis,
                                           "' of size ", g.group_size));
      }
      pairs.push_back(group[src]);
      pairs.push_back(group[dst]);
    }
  }
  ir::Attrs attrs;
  attrs.set("source_target_pairs", std::move(pairs));
  return bind(ir::OpKind::kCollectivePermute, {x}, std::move(attrs));
}

Array axis_index(const AxisNames& axes) {
  Groups g = resolve_groups("axis_index", axes);
  Array index;
  for (int a : g.axis_indices) {
    ir::Attrs attrs;
    attrs.set("mesh_shape", g.mesh->axes().sizes);
    attrs.set("axis", static_cast<int64_t>(a));
    Array i = bind(ir::OpKind::kAxisIndex, {}, std::move(attrs));
    index = index.valid() ? index * static_cast<int32_t>(g.mesh->axes().sizes[a]) + i : i;
  }
  return index;
}

namespace detail {

struct ShardMapState::Impl {
  Impl(Mesh m, std::vector<PartitionSpec> in, std::vector<PartitionSpec> out, std::string n)
      : mesh(std::move(m)), in_specs(std::move(in)), out_specs(std::move(out)), name(std::move(n)) {}
  Mesh mesh;
  std::vector<PartitionSpec> in_specs;
  std::vector<PartitionSpec> out_specs;
  std::string name;

  struct Entry {
    std::shared_ptr<const SpmdExecutable> exe;
    TreeDef out_tree;
    std::vector<bool> out_weak;
    std::vector<Sharding> leaf_shardings;  // per input leaf
  };
  mutable std::mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<const Entry>> entries;  // guarded by mu
};

ShardMapState::ShardMapState(Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
                             std::string name)
    : impl_(std::make_shared<Impl>(std::move(mesh), std::move(in_specs), std::move(out_specs), std::move(name))) {}

int64_t ShardMapState::cache_size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->entries.size());
}

namespace {

// The local (per-device) types of the argument leaves and each leaf's spec (its argument's).
struct LocalSignature {
  std::vector<AbstractValue> avals;
  std::vector<PartitionSpec> specs;
};

LocalSignature local_signature(const Mesh& mesh, const std::vector<PartitionSpec>& in_specs, const FlatArgs& flat) {
  LocalSignature sig;
  for (size_t a = 0; a < flat.ranges.size(); ++a) {
    for (size_t i = flat.ranges[a].first; i < flat.ranges[a].second; ++i) {
      const PartitionSpec& spec = in_specs[a];
      std::vector<int64_t> dims = value_or_throw(to_concrete(flat.avals[i].shape));
      throw_if_error(validate_spec(spec, mesh.axes(), dims, absl::StrCat("shard_map argument ", a)));
      sig.avals.push_back({flat.avals[i].dtype, concrete_shape(shard_shape(spec, mesh.axes(), dims))});
      sig.specs.push_back(spec);
    }
  }
  return sig;
}

// One out spec per result of the traced body (a single spec applies to all), each checked on the result.
std::vector<PartitionSpec> resolve_out_specs(const Mesh& mesh, const std::vector<PartitionSpec>& given,
                                             const std::string& what, const ir::Program& body) {
  const size_t n_out = body.results.size();
  std::vector<PartitionSpec> specs;
  if (given.size() == 1) {
    specs.assign(n_out, given.front());
  } else if (given.size() == n_out) {
    specs = given;
  } else {
    throw InvalidArgument(absl::StrCat("[shard_map] ", what, " returns ", n_out, " arrays but has ", given.size(),
                                       " out_specs (expected 1 or ", n_out, ")"));
  }
  const std::vector<AbstractValue> results = body.result_types();
  for (size_t r = 0; r < n_out; ++r) {
    // Out specs are checked on the local result: each sharded dim is multiplied back, so only axis
    // existence and repetition can fail here.
    std::vector<int64_t> dims = value_or_throw(to_concrete(results[r].shape));
    for (int d = 0; d < static_cast<int>(dims.size()); ++d) dims[d] *= num_shards(specs[r], mesh.axes(), d);
    throw_if_error(validate_spec(specs[r], mesh.axes(), dims, absl::StrCat("shard_map output ", r)));
  }
  return specs;
}

// A (validated) spec as mesh-axis indices per dimension of a value of the given rank.
ir::SpecAxes spec_axes(const PartitionSpec& spec, const MeshAxes& axes, int rank) {
  ir::SpecAxes out(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d)
    for (const std::string& name : spec.dim(d).axes) out[d].push_back(axes.index_of(name));
  return out;
}

}  // namespace

std::vector<Array> ShardMapState::call(
    const FlatArgs& flat, const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body,
    TreeDef& out_tree) {
  const std::string what = absl::StrCat("shard_map of '", impl_->name, "'");
  if (impl_->in_specs.size() != flat.ranges.size()) {
    throw InvalidArgument(absl::StrCat("[shard_map] ", what, " has ", impl_->in_specs.size(),
                                       " in_specs but was called with ", flat.ranges.size(), " arguments"));
  }
  if (current_shard_map_mesh() != nullptr) {
    throw InvalidArgument(absl::StrCat("[shard_map] ", what, " was called inside another shard_map's body; nested "
                                       "shard_maps are not supported: give the outer one all the mesh axes"));
  }
  if (in_trace()) return call_in_trace(flat, trace_body, out_tree);
  std::shared_ptr<const Impl::Entry> entry;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->entries.find(flat.key);
    if (it != impl_->entries.end()) entry = it->second;
  }
  if (!entry) {
    auto e = std::make_shared<Impl::Entry>();
    LocalSignature sig = local_signature(impl_->mesh, impl_->in_specs, flat);
    for (const PartitionSpec& spec : sig.specs) e->leaf_shardings.push_back(NamedSharding(impl_->mesh, spec));
    TracedFunction traced = [&] {
      ShardMapMeshScope scope(&impl_->mesh);
      return trace_flat(what, impl_->name, sig.avals, flat.weak, SymbolicScope(),
                        [&](std::span<const Array> tracers) { return trace_body(tracers, e->out_tree); },
                        argument_leaf_names(flat));
    }();
    if (!traced.captured.empty()) throw Internal(absl::StrCat("[shard_map] ", what, " captured enclosing tracers"));
    e->out_weak = std::move(traced.out_weak);
    std::vector<PartitionSpec> out_specs = resolve_out_specs(impl_->mesh, impl_->out_specs, what, traced.program);
    SpmdOptions options(impl_->mesh);
    options.name = what;
    options.in_specs = std::move(sig.specs);
    options.out_specs.assign(out_specs.begin(), out_specs.end());
    options.manual = true;
    e->exe = value_or_throw(SpmdExecutable::compile(traced.program, std::move(options)));
    std::lock_guard<std::mutex> lock(impl_->mu);
    entry = impl_->entries.emplace(flat.key, std::move(e)).first->second;
  }
  std::vector<ArrayValue> args;
  args.reserve(flat.leaves.size());
  for (size_t i = 0; i < flat.leaves.size(); ++i) {
    check_tracer_usable(flat.leaves[i], "shard_map");
    ArrayValue placed = value_or_throw(place_argument(flat.leaves[i].value(), entry->leaf_shardings[i], what, i));
    args.push_back(std::move(placed));
  }
  std::vector<ArrayValue> outs = value_or_throw(entry->exe->execute(args));
  out_tree = entry->out_tree;
  std::vector<Array> result;
  result.reserve(outs.size());
  for (size_t r = 0; r < outs.size(); ++r) {
    Array a(std::move(outs[r]));
    result.push_back(entry->out_weak[r] ? with_weak_type(a, true) : a);
  }
  return result;
}

std::vector<Array> ShardMapState::call_in_trace(
    const FlatArgs& flat, const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body,
    TreeDef& out_tree) {
  const std::string what = absl::StrCat("shard_map of '", impl_->name, "'");
  const Mesh& mesh = impl_->mesh;
  LocalSignature sig = local_signature(mesh, impl_->in_specs, flat);
  TreeDef tree;
  TracedFunction traced = [&] {
    ShardMapMeshScope scope(&mesh);
    return trace_flat(what, impl_->name, sig.avals, flat.weak, current_scope(),
                      [&](std::span<const Array> tracers) { return trace_body(tracers, tree); },
                      argument_leaf_names(flat));
  }();
  const std::vector<PartitionSpec> out_specs = resolve_out_specs(mesh, impl_->out_specs, what, traced.program);
  ir::ShardMapConfig config;
  config.mesh_shape = mesh.axes().sizes;
  std::vector<Array> operands = flat.leaves;
  for (size_t i = 0; i < flat.leaves.size(); ++i)
    config.in_specs.push_back(spec_axes(sig.specs[i], mesh.axes(), flat.avals[i].rank()));
  // Arrays of the enclosing trace that the body closes over enter whole on every device (replicated).
  for (const Array& c : traced.captured) {
    operands.push_back(c);
    config.in_specs.push_back(ir::SpecAxes(static_cast<size_t>(c.ndim())));
  }
  const std::vector<AbstractValue> results = traced.program.result_types();
  for (size_t r = 0; r < results.size(); ++r)
    config.out_specs.push_back(spec_axes(out_specs[r], mesh.axes(), results[r].rank()));
  const std::vector<bool> out_weak = traced.out_weak;
  config.body = std::make_shared<const ir::Program>(std::move(traced.program));
  std::vector<Array> outs = bind_control_flow("shard_map", ir::OpKind::kShardMap, ir::shard_map_attrs(config), operands,
                                              static_cast<int>(results.size()));
  note_trace_mesh(mesh, "shard_map");
  for (size_t r = 0; r < outs.size(); ++r) outs[r] = with_weak_type(outs[r], out_weak[r]);
  out_tree = std::move(tree);
  return outs;
}

}  // namespace detail
}  // namespace mcx
