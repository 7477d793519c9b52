#include "mcx/spmd/propagation.h"

#include <algorithm>
#include <functional>

#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"
#include "mcx/ir/window_rules.h"

namespace mcx::spmd::internal {
namespace {

using ir::internal::cat;
using ir::OpKind;

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Planning context of one instruction.
struct Ctx {
  const ir::Program& g;
  const ir::Instr& instr;
  std::span<const Layout> in;  // operands' current layouts
  const MeshAxes& mesh;
  OpPlan plan;

  std::vector<int64_t> dims(int operand) const { return static_dims(g, instr.operands[operand]); }
  std::vector<int64_t> result_dims() const {
    return value_or_throw(to_concrete(instr.type.shape));  // checked static by the driver
  }
  std::string axes_str(const AxisList& axes) const {
    std::string s = "{";
    for (size_t i = 0; i < axes.size(); ++i) s += (i ? "," : "") + mesh.names[axes[i]];
    return s + "}";
  }
  // Operand `k`'s current layout with the dimensions failing `keep` replicated; notes each sharded
  // dimension so gathered.
  Layout keep_only(int k, const std::function<bool(int)>& keep, std::string_view why) {
    Layout l = in[k];
    for (int d = 0; d < static_cast<int>(l.size()); ++d) {
      if (keep(d) || l[d].empty()) continue;
      plan.fallbacks.push_back(cat("operand ", k, " dim ", d, " ", axes_str(l[d]), " gathered: ", why));
      l[d].clear();
    }
    return l;
  }
  // Operand `k` fully replicated (notes any sharded dimension).
  Layout gather_all(int k, std::string_view why) {
    return keep_only(k, [](int) { return false; }, why);
  }
  // Notes each dimension of operand `k` that loses its axes from `cur` to `want` (a partner's axes
  // replacing them is a reshard, not a gather).
  void note_gathered(int k, const Layout& cur, const Layout& want, std::string_view why) {
    for (size_t d = 0; d < cur.size(); ++d)
      if (!cur[d].empty() && want[d].empty())
        plan.fallbacks.push_back(cat("operand ", k, " dim ", d, " ", axes_str(cur[d]), " gathered: ", why));
  }
};

// Index of the layout splitting the most dimensions (then the most pieces; first wins ties).
size_t best_layout(std::span<const Layout> layouts, const MeshAxes& mesh) {
  size_t best = 0;
  for (size_t i = 1; i < layouts.size(); ++i) {
    auto key = [&](size_t j) { return std::pair(sharded_dims(layouts[j], mesh), total_shards(layouts[j], mesh)); };
    if (key(i) > key(best)) best = i;
  }
  return best;
}

// Claims `axes` in `used` when none is taken yet; false (nothing claimed) otherwise.
bool claim(std::vector<bool>& used, const AxisList& axes) {
  for (int a : axes)
    if (used[a]) return false;
  for (int a : axes) used[a] = true;
  return true;
}

void elementwise(Ctx& c) {
  Layout target = c.in[best_layout(c.in, c.mesh)];
  c.plan.operands.assign(c.in.size(), target);
  c.plan.result = target;
}

void broadcast_in_dim(Ctx& c, const std::vector<int64_t>& bdims) {
  std::vector<int64_t> in = c.dims(0), out = c.result_dims();
  Layout op = c.in[0];
  c.plan.result = replicated(static_cast<int>(out.size()));
  for (size_t i = 0; i < bdims.size(); ++i) {
    if (in[i] == out[bdims[i]]) {
      c.plan.result[bdims[i]] = op[i];
    } else {
      op[i].clear();  // a broadcast (size-1) dimension holds no split axes anyway
    }
  }
  c.plan.operands = {op};
  c.plan.attrs.set("shape", concrete_shape(local_dims(c.plan.result, c.mesh, out)));
}

void reshape(Ctx& c) {
  std::vector<int64_t> in = c.dims(0), out = c.result_dims();
  // Prefix products of the output dims, to find where an input dim survives whole.
  std::vector<int64_t> out_prefix(out.size() + 1, 1);
  for (size_t e = 0; e < out.size(); ++e) out_prefix[e + 1] = out_prefix[e] * out[e];
  Layout result = replicated(static_cast<int>(out.size()));
  int64_t prefix = 1;
  std::vector<int> target(in.size(), -1);
  for (size_t d = 0; d < in.size(); ++d) {
    if (!c.in[0][d].empty()) {
      for (size_t e = 0; e < out.size(); ++e)
        if (out[e] == in[d] && out_prefix[e] == prefix) target[d] = static_cast<int>(e);
    }
    prefix *= in[d];
  }
  c.plan.operands = {c.keep_only(0, [&](int d) { return target[d] >= 0; },
                                 "reshape splits or merges it")};
  for (size_t d = 0; d < in.size(); ++d)
    if (target[d] >= 0) result[target[d]] = c.in[0][d];
  c.plan.result = result;
  c.plan.attrs.set("shape", concrete_shape(local_dims(result, c.mesh, out)));
}

void transpose(Ctx& c, const std::vector<int64_t>& perm) {
  c.plan.operands = {c.in[0]};
  c.plan.result = replicated(static_cast<int>(perm.size()));
  for (size_t i = 0; i < perm.size(); ++i) c.plan.result[i] = c.in[0][perm[i]];
}

void reduce(Ctx& c, const std::vector<int64_t>& rdims, int64_t reduce_op) {
  c.plan.operands = {c.in[0]};
  for (int d = 0; d < static_cast<int>(c.in[0].size()); ++d) {
    if (contains(rdims, d)) {
      c.plan.reduce_axes.insert(c.plan.reduce_axes.end(), c.in[0][d].begin(), c.in[0][d].end());
    } else {
      c.plan.result.push_back(c.in[0][d]);
    }
  }
  c.plan.reduce_op = reduce_op;
}

void arg_reduce(Ctx& c, int64_t dim) {
  c.plan.operands = {c.keep_only(0, [&](int d) { return d != dim; }, "argmax/argmin needs the whole dimension")};
  for (int d = 0; d < static_cast<int>(c.in[0].size()); ++d)
    if (d != dim) c.plan.result.push_back(c.plan.operands[0][d]);
}

absl::Status dot_general(Ctx& c) {
  const ir::Attrs& a = c.instr.attrs;
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lb, a.get_ints("lhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rb, a.get_ints("rhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lc, a.get_ints("lhs_contracting"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rc, a.get_ints("rhs_contracting"));
  const Layout& L = c.in[0];
  const Layout& R = c.in[1];
  Layout lhs = replicated(static_cast<int>(L.size())), rhs = replicated(static_cast<int>(R.size()));
  std::vector<bool> used(c.mesh.rank(), false);
  // A pair of dimensions that must be split alike: the lhs's axes, else the rhs's, else replicated.
  auto pair = [&](int64_t dl, int64_t dr) {
    if (!L[dl].empty() && claim(used, L[dl])) {
      lhs[dl] = rhs[dr] = L[dl];
    } else if (!R[dr].empty() && claim(used, R[dr])) {
      lhs[dl] = rhs[dr] = R[dr];
    }
  };
  auto is_free = [](int64_t d, const std::vector<int64_t>& b, const std::vector<int64_t>& k) {
    return !contains(b, d) && !contains(k, d);
  };
  for (size_t i = 0; i < lb.size(); ++i) pair(lb[i], rb[i]);
  for (int64_t d = 0; d < static_cast<int64_t>(L.size()); ++d)
    if (is_free(d, lb, lc) && claim(used, L[d])) lhs[d] = L[d];
  for (size_t i = 0; i < lc.size(); ++i) pair(lc[i], rc[i]);
  for (int64_t d = 0; d < static_cast<int64_t>(R.size()); ++d)
    if (is_free(d, rb, rc) && claim(used, R[d])) rhs[d] = R[d];
  c.note_gathered(0, L, lhs, "its axes are used by another dimension of the dot");
  c.note_gathered(1, R, rhs, "its axes are used by another dimension of the dot");
  c.plan.operands = {lhs, rhs};
  for (int64_t d : lb) c.plan.result.push_back(lhs[d]);
  for (int64_t d = 0; d < static_cast<int64_t>(L.size()); ++d)
    if (is_free(d, lb, lc)) c.plan.result.push_back(lhs[d]);
  for (int64_t d = 0; d < static_cast<int64_t>(R.size()); ++d)
    if (is_free(d, rb, rc)) c.plan.result.push_back(rhs[d]);
  for (int64_t d : lc) c.plan.reduce_axes.insert(c.plan.reduce_axes.end(), lhs[d].begin(), lhs[d].end());
  c.plan.reduce_op = 0;
  return absl::OkStatus();
}

// conv_general_dilated: the lhs batch dim and the rhs output-feature dim split the result without
// communication; with one feature group, lhs features and rhs input features split alike give partial
// sums (all_reduce), as a dot's contracting pair. Spatial dims (windows would need halos) and the
// feature dims of grouped convolutions are gathered.
absl::Status conv(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(ir::ConvConfig cfg, ir::get_conv_config(c.instr.attrs, static_cast<int>(c.in[0].size())));
  const Layout& L = c.in[0];
  const Layout& R = c.in[1];
  Layout lhs = replicated(static_cast<int>(L.size())), rhs = replicated(static_cast<int>(R.size()));
  std::vector<bool> used(c.mesh.rank(), false);
  const int64_t batch = cfg.lhs_spec[0], feature = cfg.lhs_spec[1], out_feature = cfg.rhs_spec[0],
                in_feature = cfg.rhs_spec[1];
  if (claim(used, L[batch])) lhs[batch] = L[batch];
  if (cfg.feature_group_count == 1) {
    if (claim(used, R[out_feature])) rhs[out_feature] = R[out_feature];
    if (!L[feature].empty() && claim(used, L[feature])) {
      lhs[feature] = rhs[in_feature] = L[feature];
    } else if (!R[in_feature].empty() && claim(used, R[in_feature])) {
      lhs[feature] = rhs[in_feature] = R[in_feature];
    }
  }
  c.note_gathered(0, L, lhs, "conv_general_dilated splits only batch and (ungrouped) feature dims");
  c.note_gathered(1, R, rhs, "conv_general_dilated splits only (ungrouped) feature dims");
  c.plan.operands = {lhs, rhs};
  c.plan.result = replicated(static_cast<int>(L.size()));
  c.plan.result[cfg.out_spec[0]] = lhs[batch];
  c.plan.result[cfg.out_spec[1]] = rhs[out_feature];
  c.plan.reduce_axes = lhs[feature];
  c.plan.reduce_op = 0;
  return absl::OkStatus();
}

// reduce_window keeps the splits of the dims it does not slide along (window and stride 1, no padding).
absl::Status reduce_window(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(ir::ReduceWindowConfig cfg,
                       ir::get_reduce_window_config(c.instr.attrs, static_cast<int>(c.in[0].size())));
  auto untouched = [&](int d) {
    return cfg.window_dimensions[d] == 1 && cfg.window_strides[d] == 1 && cfg.padding_low[d] == DimExpr(0) &&
           cfg.padding_high[d] == DimExpr(0);
  };
  Layout op = c.keep_only(0, untouched, "reduce_window slides its window along it");
  c.plan.operands = {op};
  c.plan.result = op;
  return absl::OkStatus();
}

absl::Status slice(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(Shape start, c.instr.attrs.get_dims("start"));
  MCX_ASSIGN_OR_RETURN(Shape limit, c.instr.attrs.get_dims("limit"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> strides, c.instr.attrs.get_ints("strides"));
  std::vector<int64_t> in = c.dims(0);
  auto whole = [&](int d) { return start[d] == DimExpr(0) && limit[d] == DimExpr(in[d]) && strides[d] == 1; };
  Layout op = c.keep_only(0, whole, "slice cuts the dimension");
  c.plan.operands = {op};
  c.plan.result = op;
  std::vector<int64_t> local = local_dims(op, c.mesh, in);
  for (size_t d = 0; d < in.size(); ++d)
    if (!op[d].empty()) limit[d] = DimExpr(local[d]);
  c.plan.attrs.set("limit", limit);
  return absl::OkStatus();
}

absl::Status pad(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(Shape low, c.instr.attrs.get_dims("low"));
  MCX_ASSIGN_OR_RETURN(Shape high, c.instr.attrs.get_dims("high"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> interior, c.instr.attrs.get_ints("interior"));
  auto untouched = [&](int d) { return low[d] == DimExpr(0) && high[d] == DimExpr(0) && interior[d] == 0; };
  Layout op = c.keep_only(0, untouched, "pad changes the dimension");
  c.plan.operands = {op, c.gather_all(1, "padding value")};
  c.plan.result = op;
  return absl::OkStatus();
}

absl::Status concatenate(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(int64_t dim, c.instr.attrs.get_int("dimension"));
  std::vector<Layout> cands;
  for (int k = 0; k < static_cast<int>(c.in.size()); ++k)
    cands.push_back(c.keep_only(k, [&](int d) { return d != dim; }, "concatenate joins along it"));
  Layout target = cands[best_layout(cands, c.mesh)];
  c.plan.operands.assign(c.in.size(), target);
  c.plan.result = target;
  return absl::OkStatus();
}

absl::Status keep_except_listed(Ctx& c, const std::vector<int64_t>& dims, std::string_view why) {
  Layout op = c.keep_only(0, [&](int d) { return !contains(dims, d); }, why);
  c.plan.operands = {op};
  c.plan.result = op;
  return absl::OkStatus();
}

absl::Status dynamic_slice(Ctx& c) {
  MCX_ASSIGN_OR_RETURN(Shape sizes, c.instr.attrs.get_dims("sizes"));
  std::vector<int64_t> in = c.dims(0);
  // A dimension taken whole has its start clamped to 0: it slices nothing there.
  Layout op = c.keep_only(0, [&](int d) { return sizes[d] == DimExpr(in[d]); }, "dynamic_slice cuts it");
  c.plan.operands = {op};
  for (size_t k = 1; k < c.in.size(); ++k) c.plan.operands.push_back(Layout{});
  c.plan.result = op;
  std::vector<int64_t> local = local_dims(op, c.mesh, in);
  for (size_t d = 0; d < in.size(); ++d)
    if (!op[d].empty()) sizes[d] = DimExpr(local[d]);
  c.plan.attrs.set("sizes", sizes);
  return absl::OkStatus();
}

void dynamic_update_slice(Ctx& c) {
  std::vector<int64_t> in = c.dims(0), upd = c.dims(1);
  auto whole = [&](int d) { return upd[d] == in[d]; };
  Layout op = c.keep_only(0, whole, "dynamic_update_slice writes part of it");
  c.plan.operands = {op, op};
  for (size_t k = 2; k < c.in.size(); ++k) c.plan.operands.push_back(Layout{});
  c.plan.result = op;
}

void take(Ctx& c) {
  const Layout& x = c.in[0];
  const Layout& idx = c.in[1];
  std::vector<bool> used = used_axes(idx, c.mesh);
  Layout xl = c.keep_only(0, [&](int d) { return d != 0 && claim(used, x[d]); },
                          "take reads rows of any index / axis used by the indices");
  c.plan.operands = {xl, idx};
  c.plan.result = idx;
  c.plan.result.insert(c.plan.result.end(), xl.begin() + 1, xl.end());
}

void scatter_add(Ctx& c) {
  Layout xl = c.keep_only(0, [](int d) { return d != 0; }, "scatter_add writes rows of any index");
  Layout il = c.gather_all(1, "scatter_add indices");
  size_t k = il.size();
  Layout ul = c.keep_only(2, [&](int d) { return d >= static_cast<int>(k); }, "scatter_add update rows");
  for (size_t d = k; d < ul.size(); ++d) ul[d] = xl[d - k + 1];
  c.plan.operands = {xl, il, ul};
  c.plan.result = xl;
}

void threefry(Ctx& c) {
  int last = static_cast<int>(c.in[1].size()) - 1;
  Layout counts = c.keep_only(1, [&](int d) { return d != last; }, "threefry2x32 needs whole (2) rows");
  c.plan.operands = {c.gather_all(0, "threefry2x32 key"), counts};
  c.plan.result = counts;
}

void gather_everything(Ctx& c, std::string_view why) {
  c.plan.operands.clear();
  for (int k = 0; k < static_cast<int>(c.in.size()); ++k) c.plan.operands.push_back(c.gather_all(k, why));
  c.plan.result = replicated(c.instr.type.rank());
}

}  // namespace

std::vector<int64_t> static_dims(const ir::Program& program, ir::ValueId v) {
  return value_or_throw(to_concrete(program.type(v).shape));
}

absl::StatusOr<OpPlan> plan_instr(const ir::Program& global, int index, std::span<const Layout> operand_layouts,
                                  const MeshAxes& mesh) {
  const ir::Instr& instr = global.instrs[index];
  Ctx c{global, instr, operand_layouts, mesh, OpPlan{}};
  c.plan.attrs = instr.attrs;
  const ir::Attrs& a = instr.attrs;
  if (ir::is_elementwise(instr.kind)) {
    elementwise(c);
    return std::move(c.plan);
  }
  switch (instr.kind) {
    case OpKind::kConstant:
    case OpKind::kIota:
      c.plan.result = replicated(instr.type.rank());
      break;
    case OpKind::kBroadcastInDim: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> bdims, a.get_ints("broadcast_dimensions"));
      broadcast_in_dim(c, bdims);
      break;
    }
    case OpKind::kReshape:
      reshape(c);
      break;
    case OpKind::kTranspose: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> perm, a.get_ints("permutation"));
      transpose(c, perm);
      break;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rdims, a.get_ints("dimensions"));
      int64_t op = instr.kind == OpKind::kReduceSum   ? 0
                   : instr.kind == OpKind::kReduceMax ? 1
                   : instr.kind == OpKind::kReduceMin ? 2
                                                      : 3;
      reduce(c, rdims, op);
      break;
    }
    case OpKind::kArgMax:
    case OpKind::kArgMin: {
      MCX_ASSIGN_OR_RETURN(int64_t dim, a.get_int("dimension"));
      arg_reduce(c, dim);
      break;
    }
    case OpKind::kDotGeneral:
      MCX_RETURN_IF_ERROR(dot_general(c));
      break;
    case OpKind::kSlice:
      MCX_RETURN_IF_ERROR(slice(c));
      break;
    case OpKind::kPad:
      MCX_RETURN_IF_ERROR(pad(c));
      break;
    case OpKind::kConcatenate:
      MCX_RETURN_IF_ERROR(concatenate(c));
      break;
    case OpKind::kReverse: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, a.get_ints("dimensions"));
      MCX_RETURN_IF_ERROR(keep_except_listed(c, dims, "reverse reorders it"));
      break;
    }
    case OpKind::kCumsum: {
      MCX_ASSIGN_OR_RETURN(int64_t dim, a.get_int("dimension"));
      MCX_RETURN_IF_ERROR(keep_except_listed(c, {dim}, "cumsum scans along it"));
      break;
    }
    case OpKind::kArgsort: {
      MCX_ASSIGN_OR_RETURN(int64_t dim, a.get_int("dimension"));
      MCX_RETURN_IF_ERROR(keep_except_listed(c, {dim}, "argsort sorts along it"));
      break;
    }
    case OpKind::kDynamicSlice:
      MCX_RETURN_IF_ERROR(dynamic_slice(c));
      break;
    case OpKind::kDynamicUpdateSlice:
      dynamic_update_slice(c);
      break;
    case OpKind::kTake:
      take(c);
      break;
    case OpKind::kScatterAdd:
      scatter_add(c);
      break;
    case OpKind::kThreefry2x32:
      threefry(c);
      break;
    case OpKind::kConvGeneralDilated:
      MCX_RETURN_IF_ERROR(conv(c));
      break;
    case OpKind::kReduceWindow:
      MCX_RETURN_IF_ERROR(reduce_window(c));
      break;
    default:
      gather_everything(c, cat(ir::op_name(instr.kind), " has no partitioning rule"));
      break;
  }
  return std::move(c.plan);
}

}  // namespace mcx::spmd::internal
