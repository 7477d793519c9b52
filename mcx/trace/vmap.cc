#include "mcx/trace/vmap.h"

#include "absl/strings/str_cat.h"
#include "mcx/ir/batching.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"

namespace mcx::detail {
namespace {

std::string leaf_name(const FlatArgs& flat, size_t leaf) {
  return absl::StrCat("argument ", arg_of_leaf(flat, leaf), " (leaf ", leaf, ", ", flat.avals[leaf].to_string(), ")");
}

// Moves axis `from` of x to position `to`.
Array move_axis(const Array& x, int from, int to) {
  if (from == to) return x;
  std::vector<int64_t> perm;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d != from) perm.push_back(d);
  }
  perm.insert(perm.begin() + to, from);
  return transpose(x, std::move(perm));
}

}  // namespace

std::vector<std::optional<int>> leaf_axes_of(const FlatArgs& flat, const std::vector<std::optional<int>>& in_axes,
                                             const std::vector<bool>& arg_is_static) {
  const size_t num_args = flat.ranges.size();
  if (!in_axes.empty() && in_axes.size() != num_args) {
    throw InvalidArgument(absl::StrCat("[vmap] in_axes has ", in_axes.size(), " entries for ", num_args,
                                       " arguments; give one per argument (std::nullopt for a shared one)"));
  }
  std::vector<std::optional<int>> axes(flat.leaves.size());
  for (size_t a = 0; a < num_args; ++a) {
    std::optional<int> axis = in_axes.empty() ? (arg_is_static[a] ? std::nullopt : std::optional<int>(0)) : in_axes[a];
    if (arg_is_static[a] && axis) {
      throw InvalidArgument(absl::StrCat("[vmap] argument ", a, " is a static value; its in_axes entry must be "
                                         "std::nullopt"));
    }
    for (size_t l = flat.ranges[a].first; l < flat.ranges[a].second; ++l) axes[l] = axis;
  }
  return axes;
}

std::vector<Array> vmap_leaves(const std::string& name, const FlatArgs& flat,
                               const std::vector<std::optional<int>>& leaf_axes, int out_axes,
                               const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& body,
                               TreeDef& out_tree) {
  FlatArgs example = flat;  // one example's leaf types
  std::vector<Array> moved = flat.leaves;
  std::vector<bool> batched(flat.leaves.size(), false);
  std::optional<DimExpr> size;
  size_t size_leaf = 0;
  int size_axis = 0;
  for (size_t l = 0; l < flat.leaves.size(); ++l) {
    if (!leaf_axes[l]) continue;
    const int rank = flat.avals[l].rank();
    int axis = *leaf_axes[l] < 0 ? *leaf_axes[l] + rank : *leaf_axes[l];
    if (axis < 0 || axis >= rank) {
      throw InvalidArgument(absl::StrCat("[vmap] ", leaf_name(flat, l), " cannot be mapped over axis ", *leaf_axes[l],
                                         ": its rank is ", rank));
    }
    const DimExpr n = flat.avals[l].shape[static_cast<size_t>(axis)];
    if (!size) {
      size = n;
      size_leaf = l;
      size_axis = axis;
    } else if (!current_scope().known_equal(*size, n)) {
      throw InvalidArgument(absl::StrCat("[vmap] mapped axes have different sizes: ", leaf_name(flat, size_leaf), " has ",
                                         size->to_string(), " along axis ", size_axis, ", ", leaf_name(flat, l), " has ",
                                         n.to_string(), " along axis ", axis));
    }
    moved[l] = move_axis(flat.leaves[l], axis, 0);
    example.avals[l].shape.erase(example.avals[l].shape.begin() + axis);
    batched[l] = true;
  }
  if (!size) {
    throw InvalidArgument("[vmap] no argument is mapped (every in_axes entry is std::nullopt); vmap needs at least "
                          "one mapped array argument");
  }
  TracedFunction traced =
      trace_flat(absl::StrCat("vmap of '", name, "'"), name, example.avals, example.weak, current_scope(),
                 [&](std::span<const Array> tracers) { return body(tracers, out_tree); },
                 argument_leaf_names(flat));
  batched.resize(batched.size() + traced.captured.size(), false);
  ir::Program program = value_or_throw(ir::vmap_program(traced.program, batched, *size));
  std::vector<Array> args = moved;
  args.insert(args.end(), traced.captured.begin(), traced.captured.end());
  std::vector<Array> outs = call_program(program, args, "vmap", traced.mesh);
  for (Array& out : outs) {
    const int rank = out.ndim();
    const int to = out_axes < 0 ? out_axes + rank : out_axes;
    if (to < 0 || to >= rank) {
      throw InvalidArgument(absl::StrCat("[vmap] out_axes ", out_axes, " is outside the output ", out.aval().to_string(),
                                         " (rank ", rank, ", the batch axis included)"));
    }
    out = move_axis(out, 0, to);
  }
  return outs;
}

}  // namespace mcx::detail
