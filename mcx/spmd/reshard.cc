#include "mcx/spmd/reshard.h"

#include <algorithm>

#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx::spmd::internal {
namespace {

using ir::internal::cat;

// True when `prefix` is a prefix of `list`.
bool is_prefix(const AxisList& prefix, const AxisList& list) {
  return prefix.size() <= list.size() && std::equal(prefix.begin(), prefix.end(), list.begin());
}

size_t common_prefix(const AxisList& a, const AxisList& b) {
  size_t p = 0;
  while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
  return p;
}

}  // namespace

std::vector<int64_t> Emitter::flat_groups(const AxisList& axes) const {
  std::vector<int64_t> flat;
  for (const auto& group : axis_groups(mesh_, axes)) flat.insert(flat.end(), group.begin(), group.end());
  return flat;
}

ir::ValueId Emitter::i32(int64_t v) {
  auto it = i32_.find(v);
  if (it != i32_.end()) return it->second;
  ir::ValueId c = b_.scalar_constant(DType::kInt32, static_cast<double>(v));
  i32_.emplace(v, c);
  return c;
}

absl::StatusOr<ir::ValueId> Emitter::axis_coordinate(int axis) {
  auto it = axis_index_.find(axis);
  if (it != axis_index_.end()) return it->second;
  ir::Attrs attrs{{"mesh_shape", mesh_.sizes}, {"axis", static_cast<int64_t>(axis)}};
  MCX_ASSIGN_OR_RETURN(ir::ValueId v, b_.emit(ir::OpKind::kAxisIndex, {}, std::move(attrs)));
  axis_index_.emplace(axis, v);
  return v;
}

absl::StatusOr<ir::ValueId> Emitter::all_reduce(ir::ValueId local, const AxisList& axes, int64_t reduce_op) {
  if (axes_size(axes, mesh_) == 1) return local;
  int64_t group_size = axes_size(axes, mesh_);
  ir::Attrs attrs{{"reduce", reduce_op}, {"replica_groups", flat_groups(axes)}, {"group_size", group_size}};
  MCX_ASSIGN_OR_RETURN(ir::ValueId v, b_.emit(ir::OpKind::kAllReduce, {local}, std::move(attrs)));
  ++stats_.all_reduces;
  return v;
}

absl::StatusOr<ir::ValueId> Emitter::reshard(ir::ValueId local, std::span<const int64_t> dims, const Layout& from,
                                             const Layout& to) {
  if (!is_valid(from, mesh_, dims) || !is_valid(to, mesh_, dims))
    return absl::InternalError(cat("[partition] reshard between invalid layouts ", layout_to_string(from, mesh_),
                                   " -> ", layout_to_string(to, mesh_)));
  if (from == to) return local;
  const int rank = static_cast<int>(dims.size());
  Layout cur = from;
  ir::ValueId v = local;
  bool communicated = false;

  // 1. all_to_all: axes leaving d exactly as the next axes arriving at an e that loses nothing.
  for (int d = 0; d < rank; ++d) {
    size_t p = common_prefix(cur[d], to[d]);
    if (p == cur[d].size()) continue;
    AxisList leaving(cur[d].begin() + p, cur[d].end());
    for (int e = 0; e < rank; ++e) {
      if (e == d || !is_prefix(cur[e], to[e])) continue;
      size_t n = cur[e].size();
      if (to[e].size() < n + leaving.size() ||
          !std::equal(leaving.begin(), leaving.end(), to[e].begin() + static_cast<std::ptrdiff_t>(n)))
        continue;
      int64_t group_size = axes_size(leaving, mesh_);
      ir::Attrs attrs{{"split_dimension", static_cast<int64_t>(e)},
                      {"concat_dimension", static_cast<int64_t>(d)},
                      {"replica_groups", flat_groups(leaving)},
                      {"group_size", group_size}};
      MCX_ASSIGN_OR_RETURN(v, b_.emit(ir::OpKind::kAllToAll, {v}, std::move(attrs)));
      ++stats_.all_to_alls;
      communicated = true;
      cur[d].resize(p);
      cur[e].insert(cur[e].end(), leaving.begin(), leaving.end());
      break;
    }
  }

  // 2. all_gather the axes still leaving each dimension.
  for (int d = 0; d < rank; ++d) {
    size_t p = common_prefix(cur[d], to[d]);
    if (p == cur[d].size()) continue;
    AxisList leaving(cur[d].begin() + p, cur[d].end());
    int64_t group_size = axes_size(leaving, mesh_);
    ir::Attrs attrs{{"dimension", static_cast<int64_t>(d)},
                    {"replica_groups", flat_groups(leaving)},
                    {"group_size", group_size}};
    MCX_ASSIGN_OR_RETURN(v, b_.emit(ir::OpKind::kAllGather, {v}, std::move(attrs)));
    ++stats_.all_gathers;
    communicated = true;
    cur[d].resize(p);
  }

  // 3. Slice locally for the arriving axes (now every cur[d] is a prefix of to[d], and the arriving
  // axes are used nowhere in cur, so the value is replicated along them).
  bool slice = false;
  for (int d = 0; d < rank; ++d) slice = slice || cur[d].size() < to[d].size();
  if (slice) {
    std::vector<int64_t> new_local = local_dims(to, mesh_, dims);
    std::vector<ir::ValueId> operands = {v};
    for (int d = 0; d < rank; ++d) {
      if (cur[d].size() == to[d].size()) {
        operands.push_back(i32(0));
        continue;
      }
      // Linear index over the arriving axes, first major.
      ir::ValueId index = -1;
      for (size_t i = cur[d].size(); i < to[d].size(); ++i) {
        MCX_ASSIGN_OR_RETURN(ir::ValueId c, axis_coordinate(to[d][i]));
        if (index < 0) {
          index = c;
        } else {
          ir::ValueId stride = i32(mesh_.sizes[to[d][i]]);
          MCX_ASSIGN_OR_RETURN(index, (b_.emit(ir::OpKind::kMul, std::vector<ir::ValueId>{index, stride})));
          MCX_ASSIGN_OR_RETURN(index, (b_.emit(ir::OpKind::kAdd, std::vector<ir::ValueId>{index, c})));
        }
      }
      if (new_local[d] != 1) {
        ir::ValueId size = i32(new_local[d]);
        MCX_ASSIGN_OR_RETURN(index, (b_.emit(ir::OpKind::kMul, std::vector<ir::ValueId>{index, size})));
      }
      operands.push_back(index);
    }
    ir::Attrs attrs{{"sizes", concrete_shape(new_local)}};
    MCX_ASSIGN_OR_RETURN(v, b_.emit(ir::OpKind::kDynamicSlice, std::move(operands), std::move(attrs)));
    if (!communicated) ++stats_.local_slices;
  }
  return v;
}

}  // namespace mcx::spmd::internal
