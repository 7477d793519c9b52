#include "mcx/ir/spmd_rules.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
using internal::join;
namespace {

std::string ints_str(std::span<const int64_t> v) { return cat("[", join(v, ","), "]"); }

template <typename... A>
absl::Status err(std::string_view op, const A&... a) {
  return internal::op_error(op, a...);
}
absl::Status wrap(std::string_view op, const absl::Status& s) { return internal::with_op_prefix(op, s); }

absl::StatusOr<int64_t> get_int(std::string_view op, const Attrs& a, std::string_view n) {
  auto v = a.get_int(n);
  if (!v.ok()) return wrap(op, v.status());
  return *v;
}
absl::StatusOr<std::vector<int64_t>> get_ints(std::string_view op, const Attrs& a, std::string_view n) {
  auto v = a.get_ints(n);
  if (!v.ok()) return wrap(op, v.status());
  return *v;
}

absl::Status check_axis(std::string_view op, int64_t axis, const AbstractValue& x, std::string_view attr) {
  if (axis < 0 || axis >= x.rank())
    return err(op, "attribute '", attr, "' is ", axis, ", expected an axis in [0, ", x.rank(), ") for ",
               x.to_string());
  return absl::OkStatus();
}

// dims[d] / g when g divides it (decided on constants or on the scope's normal form).
absl::StatusOr<DimExpr> divide_dim(std::string_view op, const AbstractValue& x, int64_t d, int64_t g,
                                   const SymbolicScope& scope, std::string_view attr) {
  const DimExpr& n = x.shape[d];
  if (auto c = n.constant_value()) {
    if (*c % g != 0)
      return err(op, x.to_string(), " dim ", d, " (", attr, ") is ", *c, ", not divisible by group_size ", g);
    return DimExpr(*c / g);
  }
  DimExpr q = floordiv(n, DimExpr(g));
  if (q * DimExpr(g) == n || scope.known_equal(q * DimExpr(g), n)) return q;
  return err(op, x.to_string(), " dim ", d, " (", attr, ") is ", n.to_string(),
             ", not known to be divisible by group_size ", g);
}

absl::Status check_mesh_shape(std::string_view op, std::span<const int64_t> mesh) {
  if (mesh.empty()) return err(op, "attribute 'mesh_shape' is empty, expected at least one mesh axis");
  int64_t devices = 1;
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (mesh[i] < 1) return err(op, "attribute 'mesh_shape' ", ints_str(mesh), " entry ", i, " is ", mesh[i],
                                ", expected >= 1");
    if (mesh[i] > kMaxPartitions / devices)
      return err(op, "attribute 'mesh_shape' ", ints_str(mesh), " has more than ", kMaxPartitions, " devices");
    devices *= mesh[i];
  }
  return absl::OkStatus();
}

// The `sharding` encoding of spmd/partition_spec.h: per dimension a count n (-1: unconstrained) and n
// mesh-axis indices; at most rank dimensions; every axis in range and used at most once; a sharded
// constant dimension must divide evenly.
absl::Status check_sharding(std::string_view op, std::span<const int64_t> enc, std::span<const int64_t> mesh,
                            const AbstractValue& x) {
  std::vector<bool> used(mesh.size(), false);
  size_t i = 0;
  int dim = 0;
  while (i < enc.size()) {
    int64_t n = enc[i++];
    if (dim >= x.rank())
      return err(op, "attribute 'sharding' ", ints_str(enc), " has more dimensions than ", x.to_string());
    if (n == -1) {
      ++dim;
      continue;
    }
    if (n < 0 || static_cast<size_t>(n) > enc.size() - i)
      return err(op, "attribute 'sharding' ", ints_str(enc), ": dimension ", dim, " has axis count ", n,
                 ", expected -1 or 0..", enc.size() - i);
    int64_t shards = 1;
    for (int64_t k = 0; k < n; ++k) {
      int64_t a = enc[i++];
      if (a < 0 || a >= static_cast<int64_t>(mesh.size()))
        return err(op, "attribute 'sharding' ", ints_str(enc), ": dimension ", dim, " names mesh axis ", a,
                   ", expected an axis in [0, ", mesh.size(), ")");
      if (used[a]) return err(op, "attribute 'sharding' ", ints_str(enc), " uses mesh axis ", a, " twice");
      used[a] = true;
      shards *= mesh[a];
    }
    if (auto c = x.shape[dim].constant_value(); c && *c % shards != 0)
      return err(op, x.to_string(), " dim ", dim, " is ", *c, ", not divisible by its ", shards,
                 " shards (mesh_shape ", ints_str(mesh), ")");
    ++dim;
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int> ReplicaGroups::group(int64_t g) const {
  std::vector<int> out;
  for (int64_t k = 0; k < group_size; ++k) out.push_back(static_cast<int>(flat[g * group_size + k]));
  return out;
}

ReplicaGroups::Position ReplicaGroups::position_of(int64_t partition) const {
  for (size_t i = 0; i < flat.size(); ++i)
    if (flat[i] == partition)
      return {static_cast<int64_t>(i) / group_size, static_cast<int>(static_cast<int64_t>(i) % group_size)};
  return {};
}

absl::Status validate_replica_groups(std::string_view op, std::span<const int64_t> flat, int64_t group_size) {
  if (group_size < 1) return err(op, "attribute 'group_size' is ", group_size, ", expected >= 1");
  if (static_cast<int64_t>(flat.size()) > kMaxPartitions)
    return err(op, "attribute 'replica_groups' has ", flat.size(), " entries, more than ", kMaxPartitions,
               " partitions");
  if (flat.empty() || flat.size() % group_size != 0)
    return err(op, "attribute 'replica_groups' ", ints_str(flat), " has ", flat.size(),
               " entries, expected a non-empty multiple of group_size ", group_size);
  std::vector<bool> seen(flat.size(), false);
  for (size_t i = 0; i < flat.size(); ++i) {
    int64_t p = flat[i];
    if (p < 0 || p >= static_cast<int64_t>(flat.size()))
      return err(op, "attribute 'replica_groups' ", ints_str(flat), " entry ", i, " is ", p,
                 ", expected a partition id in [0, ", flat.size(), ") (every id 0..N-1 exactly once)");
    if (seen[p])
      return err(op, "attribute 'replica_groups' ", ints_str(flat), " lists partition ", p,
                 " twice, expected every id 0..", flat.size() - 1, " exactly once");
    seen[p] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicaGroups> get_replica_groups(std::string_view op, const Attrs& attrs) {
  ReplicaGroups g;
  MCX_ASSIGN_OR_RETURN(g.flat, get_ints(op, attrs, "replica_groups"));
  MCX_ASSIGN_OR_RETURN(g.group_size, get_int(op, attrs, "group_size"));
  MCX_RETURN_IF_ERROR(validate_replica_groups(op, g.flat, g.group_size));
  return g;
}

absl::StatusOr<ReduceOp> get_reduce_op(std::string_view op, const Attrs& attrs) {
  MCX_ASSIGN_OR_RETURN(int64_t r, get_int(op, attrs, "reduce"));
  if (r < 0 || r > 3) return err(op, "attribute 'reduce' is ", r, ", expected 0 (sum), 1 (max), 2 (min) or 3 (prod)");
  return static_cast<ReduceOp>(r);
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> get_source_target_pairs(std::string_view op,
                                                                                   const Attrs& attrs) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> flat, get_ints(op, attrs, "source_target_pairs"));
  if (flat.size() % 2 != 0)
    return err(op, "attribute 'source_target_pairs' ", ints_str(flat), " has ", flat.size(),
               " entries, expected (source, target) pairs");
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::set<int64_t> sources, targets;
  for (size_t i = 0; i < flat.size(); i += 2) {
    int64_t s = flat[i], t = flat[i + 1];
    if (s < 0 || t < 0 || s >= kMaxPartitions || t >= kMaxPartitions)
      return err(op, "attribute 'source_target_pairs' ", ints_str(flat), " pair ", i / 2, " is (", s, ", ", t,
                 "), expected partition ids in [0, ", kMaxPartitions, ")");
    if (!sources.insert(s).second)
      return err(op, "attribute 'source_target_pairs' ", ints_str(flat), " has source ", s, " twice");
    if (!targets.insert(t).second)
      return err(op, "attribute 'source_target_pairs' ", ints_str(flat), " has target ", t, " twice");
    pairs.emplace_back(s, t);
  }
  return pairs;
}

int64_t axis_index_value(std::span<const int64_t> mesh_shape, int64_t axis, int64_t partition) {
  int64_t stride = 1;
  for (size_t i = axis + 1; i < mesh_shape.size(); ++i) stride *= mesh_shape[i];
  return (partition / stride) % mesh_shape[axis];
}

absl::StatusOr<AbstractValue> spmd_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                              const Attrs& attrs, const SymbolicScope& scope) {
  const std::string_view op = op_name(kind);
  if (kind == OpKind::kAxisIndex) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, get_ints(op, attrs, "mesh_shape"));
    MCX_ASSIGN_OR_RETURN(int64_t axis, get_int(op, attrs, "axis"));
    MCX_RETURN_IF_ERROR(check_mesh_shape(op, mesh));
    if (axis < 0 || axis >= static_cast<int64_t>(mesh.size()))
      return err(op, "attribute 'axis' is ", axis, ", expected a mesh axis in [0, ", mesh.size(),
                 ") for mesh_shape ", ints_str(mesh));
    return AbstractValue{DType::kInt32, {}};
  }
  const AbstractValue& x = operands[0];
  switch (kind) {
    case OpKind::kAllReduce: {
      MCX_ASSIGN_OR_RETURN(ReduceOp r, get_reduce_op(op, attrs));
      MCX_RETURN_IF_ERROR(get_replica_groups(op, attrs).status());
      if (is_bool(x.dtype) && r != ReduceOp::kMax && r != ReduceOp::kMin)
        return err(op, "operand must be numeric for reduce ", std::string(reduce_op_name(r)), ", found ", x.to_string(),
                   " (bool takes max or min)");
      return x;
    }
    case OpKind::kAllGather: {
      MCX_ASSIGN_OR_RETURN(ReplicaGroups g, get_replica_groups(op, attrs));
      MCX_ASSIGN_OR_RETURN(int64_t d, get_int(op, attrs, "dimension"));
      if (x.rank() < 1) return err(op, "operand must have rank >= 1, found ", x.to_string());
      MCX_RETURN_IF_ERROR(check_axis(op, d, x, "dimension"));
      AbstractValue out = x;
      out.shape[d] = x.shape[d] * DimExpr(g.group_size);
      return out;
    }
    case OpKind::kReduceScatter: {
      MCX_ASSIGN_OR_RETURN(ReduceOp r, get_reduce_op(op, attrs));
      (void)r;
      MCX_ASSIGN_OR_RETURN(ReplicaGroups g, get_replica_groups(op, attrs));
      MCX_ASSIGN_OR_RETURN(int64_t d, get_int(op, attrs, "dimension"));
      if (is_bool(x.dtype)) return err(op, "operand must be numeric, found ", x.to_string());
      MCX_RETURN_IF_ERROR(check_axis(op, d, x, "dimension"));
      AbstractValue out = x;
      MCX_ASSIGN_OR_RETURN(out.shape[d], divide_dim(op, x, d, g.group_size, scope, "dimension"));
      return out;
    }
    case OpKind::kAllToAll: {
      MCX_ASSIGN_OR_RETURN(ReplicaGroups g, get_replica_groups(op, attrs));
      MCX_ASSIGN_OR_RETURN(int64_t sd, get_int(op, attrs, "split_dimension"));
      MCX_ASSIGN_OR_RETURN(int64_t cd, get_int(op, attrs, "concat_dimension"));
      MCX_RETURN_IF_ERROR(check_axis(op, sd, x, "split_dimension"));
      MCX_RETURN_IF_ERROR(check_axis(op, cd, x, "concat_dimension"));
      AbstractValue out = x;
      MCX_ASSIGN_OR_RETURN(out.shape[sd], divide_dim(op, x, sd, g.group_size, scope, "split_dimension"));
      out.shape[cd] = out.shape[cd] * DimExpr(g.group_size);
      return out;
    }
    case OpKind::kCollectivePermute: {
      MCX_RETURN_IF_ERROR(get_source_target_pairs(op, attrs).status());
      return x;
    }
    case OpKind::kShardingConstraint: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> mesh, get_ints(op, attrs, "mesh_shape"));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> enc, get_ints(op, attrs, "sharding"));
      MCX_RETURN_IF_ERROR(check_mesh_shape(op, mesh));
      MCX_RETURN_IF_ERROR(check_sharding(op, enc, mesh, x));
      return x;
    }
    default: break;
  }
  return absl::InternalError(cat("[", op, "] not an SPMD op"));
}

Attrs all_reduce_attrs(ReduceOp op, std::vector<int64_t> replica_groups, int64_t group_size) {
  return Attrs{{"group_size", group_size},
               {"reduce", static_cast<int64_t>(op)},
               {"replica_groups", std::move(replica_groups)}};
}
Attrs all_gather_attrs(int64_t dimension, std::vector<int64_t> replica_groups, int64_t group_size) {
  return Attrs{{"dimension", dimension}, {"group_size", group_size}, {"replica_groups", std::move(replica_groups)}};
}
Attrs reduce_scatter_attrs(int64_t dimension, ReduceOp op, std::vector<int64_t> replica_groups,
                           int64_t group_size) {
  return Attrs{{"dimension", dimension},
               {"group_size", group_size},
               {"reduce", static_cast<int64_t>(op)},
               {"replica_groups", std::move(replica_groups)}};
}
Attrs all_to_all_attrs(int64_t split_dimension, int64_t concat_dimension, std::vector<int64_t> replica_groups,
                       int64_t group_size) {
  return Attrs{{"concat_dimension", concat_dimension},
               {"group_size", group_size},
               {"replica_groups", std::move(replica_groups)},
               {"split_dimension", split_dimension}};
}
Attrs collective_permute_attrs(std::vector<int64_t> source_target_pairs) {
  return Attrs{{"source_target_pairs", std::move(source_target_pairs)}};
}
Attrs axis_index_attrs(std::vector<int64_t> mesh_shape, int64_t axis) {
  return Attrs{{"axis", axis}, {"mesh_shape", std::move(mesh_shape)}};
}

}  // namespace mcx::ir
