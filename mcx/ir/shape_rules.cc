#include "mcx/ir/shape_rules.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/debug_print.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/ir/str_util.h"
#include "mcx/ir/window_rules.h"
#include "mcx/core/error.h"

namespace mcx::ir {
using internal::cat;
using internal::join;
namespace {

std::string ints_str(const std::vector<int64_t>& v) { return cat("[", join(v, ","), "]"); }

// Everything a rule needs, plus error helpers that prefix "[op_name] ".
struct Rule {
  OpKind kind;
  std::string_view name;
  std::span<const AbstractValue> ops;
  const Attrs& attrs;
  const SymbolicScope& scope;

  template <typename... A>
  absl::Status err(const A&... a) const {
    return internal::op_error(name, a...);
  }
  // Re-prefixes a status from Attrs or SymbolicScope with this op's name.
  absl::Status wrap(const absl::Status& s) const { return internal::with_op_prefix(name, s); }
  const AbstractValue& op(int i) const { return ops[i]; }
  std::string t(int i) const { return ops[i].to_string(); }

  absl::StatusOr<int64_t> get_int(std::string_view n) const {
    auto v = attrs.get_int(n);
    if (!v.ok()) return wrap(v.status());
    return *v;
  }
  absl::StatusOr<std::vector<int64_t>> get_ints(std::string_view n) const {
    auto v = attrs.get_ints(n);
    if (!v.ok()) return wrap(v.status());
    return *v;
  }
  absl::StatusOr<Shape> get_dims(std::string_view n) const {
    auto v = attrs.get_dims(n);
    if (!v.ok()) return wrap(v.status());
    return *v;
  }
  absl::StatusOr<DType> get_dtype(std::string_view n) const {
    auto v = attrs.get_dtype(n);
    if (!v.ok()) return wrap(v.status());
    return *v;
  }
  // Decided a >= b, or the scope's inconclusive error prefixed with the op name.
  // context says what is being checked, e.g. "dim 0: limit 16 <= operand f32[b] dim 0".
  absl::StatusOr<bool> ge(const DimExpr& a, const DimExpr& b, const std::string& context) const {
    auto v = scope.ge(a, b);
    if (!v.ok()) return absl::Status(v.status().code(), cat("[", name, "] ", context, ": ", std::string(v.status().message())));
    return *v;
  }
  bool eq(const DimExpr& a, const DimExpr& b) const { return a == b || scope.known_equal(a, b); }
  bool same_shape(const Shape& a, const Shape& b) const {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!eq(a[i], b[i])) return false;
    return true;
  }
  absl::Status check_axis(int64_t axis, int rank, std::string_view attr) const {
    if (axis < 0 || axis >= rank)
      return err("attribute '", attr, "' is ", axis, ", expected an axis in [0, ", rank, ") for ", t(0));
    return absl::OkStatus();
  }
  // Dims given as attributes (result shapes, sizes) must not be negative constants.
  absl::Status check_nonneg_dims(const Shape& s, std::string_view attr) const {
    for (size_t i = 0; i < s.size(); ++i) {
      auto c = s[i].constant_value();
      if (c && *c < 0) return err("attribute '", attr, "' entry ", i, " is ", *c, ", expected >= 0");
    }
    return absl::OkStatus();
  }
};

// Names of the attributes each op takes (op.h); anything else is rejected.
std::vector<std::string_view> expected_attr_names(OpKind k) {
  switch (k) {
    case OpKind::kConstant: return {"value"};
    case OpKind::kIota: return {"dimension", "dtype", "shape"};
    case OpKind::kConvert: return {"dtype"};
    case OpKind::kBroadcastInDim: return {"broadcast_dimensions", "shape"};
    case OpKind::kReshape: return {"shape"};
    case OpKind::kTranspose: return {"permutation"};
    case OpKind::kSlice: return {"limit", "start", "strides"};
    case OpKind::kDynamicSlice: return {"sizes"};
    case OpKind::kConcatenate: return {"dimension"};
    case OpKind::kPad: return {"high", "interior", "low"};
    case OpKind::kReverse:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: return {"dimensions"};
    case OpKind::kArgMax:
    case OpKind::kArgMin: return {"dimension", "index_dtype"};
    case OpKind::kDotGeneral: return {"lhs_batch", "lhs_contracting", "rhs_batch", "rhs_contracting"};
    case OpKind::kCumsum: return {"dimension", "reverse"};
    case OpKind::kArgsort: return {"dimension", "descending"};
    case OpKind::kAllReduce: return {"group_size", "reduce", "replica_groups"};
    case OpKind::kAllGather: return {"dimension", "group_size", "replica_groups"};
    case OpKind::kReduceScatter: return {"dimension", "group_size", "reduce", "replica_groups"};
    case OpKind::kAllToAll: return {"concat_dimension", "group_size", "replica_groups", "split_dimension"};
    case OpKind::kCollectivePermute: return {"source_target_pairs"};
    case OpKind::kAxisIndex: return {"axis", "mesh_shape"};
    case OpKind::kShardingConstraint: return {"mesh_shape", "sharding"};
    case OpKind::kConvGeneralDilated:
      return {"feature_group_count", "lhs_dilation", "lhs_spec", "out_spec", "padding_high",
              "padding_low", "rhs_dilation", "rhs_spec", "window_strides"};
    case OpKind::kReduceWindow:
      return {"padding_high", "padding_low", "reduce", "window_dimensions", "window_strides"};
    case OpKind::kRematBarrier: return {"region", "role"};
    case OpKind::kWhile: return {"regions", "num_carry", "num_cond_consts", "result"};
    case OpKind::kScan: return {"regions", "num_carry", "num_xs", "length", "reverse", "result"};
    case OpKind::kCond: return {"regions", "branch_consts", "result"};
    case OpKind::kCustomVjpCall:
    case OpKind::kCustomJvpCall: return {"regions", "num_args", "region_consts", "result"};
    case OpKind::kShardMap: return {"regions", "mesh_shape", "in_specs", "out_specs", "result"};
    case OpKind::kDebugPrint: return {"format", "partition"};
    default: return {};
  }
}

std::string dtype_class_msg(DType t) { return std::string(dtype_short_name(t)); }

// Dtype requirement of unary/binary/compare/ternary elementwise ops.
enum class DReq { kAny, kNumeric, kFloating, kBoolOrInt };

DReq dtype_req(OpKind k) {
  switch (k) {
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kSign:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kRem:
    case OpKind::kPow:
    case OpKind::kClamp: return DReq::kNumeric;
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kLog1p:
    case OpKind::kExpm1:
    case OpKind::kTanh:
    case OpKind::kLogistic:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kFloor:
    case OpKind::kCeil:
    case OpKind::kRound:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kErf:
    case OpKind::kErfc:
    case OpKind::kErfInv:
    case OpKind::kIsFinite: return DReq::kFloating;
    case OpKind::kNot:
    case OpKind::kAnd:
    case OpKind::kOr:
    case OpKind::kXor: return DReq::kBoolOrInt;
    default: return DReq::kAny;
  }
}

absl::Status check_dtype_req(const Rule& r, DReq req, const AbstractValue& v, std::string_view what) {
  DType d = v.dtype;
  switch (req) {
    case DReq::kAny: return absl::OkStatus();
    case DReq::kNumeric:
      if (!is_bool(d)) return absl::OkStatus();
      return r.err(what, " must be numeric (integer or floating), found ", v.to_string());
    case DReq::kFloating:
      if (is_floating(d)) return absl::OkStatus();
      return r.err(what, " must be floating, found ", v.to_string());
    case DReq::kBoolOrInt:
      if (is_bool(d) || is_integer(d)) return absl::OkStatus();
      return r.err(what, " must be bool or integer, found ", v.to_string());
  }
  return absl::OkStatus();
}

absl::Status check_same_types(const Rule& r, int from, int to) {
  for (int i = from + 1; i < to; ++i) {
    if (!r.same_shape(r.op(from).shape, r.op(i).shape))
      return r.err("operand shapes differ: ", r.t(from), " vs ", r.t(i));
    if (r.op(from).dtype != r.op(i).dtype)
      return r.err("operand dtypes differ: ", r.t(from), " vs ", r.t(i));
  }
  return absl::OkStatus();
}

// remat_barrier's attributes: a region id >= 0 and a role in {0 input, 1 output, 2 recomputed input}.
absl::Status check_remat_attrs(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(int64_t region, r.get_int("region"));
  MCX_ASSIGN_OR_RETURN(int64_t role, r.get_int("role"));
  if (region < 0) return r.err("attribute 'region' is ", region, ", expected >= 0");
  if (role < 0 || role > 2) return r.err("attribute 'role' is ", role, ", expected 0 (input), 1 (output) or 2 (recomputed input)");
  return absl::OkStatus();
}

absl::StatusOr<AbstractValue> elementwise(const Rule& r) {
  OpClass c = op_info(r.kind).op_class;
  if (r.kind == OpKind::kRematBarrier) MCX_RETURN_IF_ERROR(check_remat_attrs(r));
  DReq req = dtype_req(r.kind);
  if (r.kind == OpKind::kSelect) {
    if (!is_bool(r.op(0).dtype)) return r.err("predicate must be bool, found ", r.t(0));
    if (!r.same_shape(r.op(0).shape, r.op(1).shape))
      return r.err("operand shapes differ: ", r.t(0), " vs ", r.t(1));
    MCX_RETURN_IF_ERROR(check_same_types(r, 1, 3));
    return r.op(1);
  }
  MCX_RETURN_IF_ERROR(check_same_types(r, 0, static_cast<int>(r.ops.size())));
  MCX_RETURN_IF_ERROR(check_dtype_req(r, req, r.op(0), r.ops.size() == 1 ? "operand" : "operands"));
  if (c == OpClass::kCompare || r.kind == OpKind::kIsFinite) return AbstractValue{DType::kBool, r.op(0).shape};
  if (r.kind == OpKind::kClamp) return r.op(1);
  return r.op(0);
}

absl::StatusOr<AbstractValue> rule_constant(const Rule& r) {
  auto b = r.attrs.get_buffer("value");
  if (!b.ok()) return r.wrap(b.status());
  if (!b->valid()) return r.err("attribute 'value' is an empty Buffer");
  return b->abstract_value();
}

absl::StatusOr<AbstractValue> rule_iota(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(DType dtype, r.get_dtype("dtype"));
  MCX_ASSIGN_OR_RETURN(Shape shape, r.get_dims("shape"));
  MCX_ASSIGN_OR_RETURN(int64_t dim, r.get_int("dimension"));
  if (is_bool(dtype)) return r.err("dtype must be numeric, found bool");
  MCX_RETURN_IF_ERROR(r.check_nonneg_dims(shape, "shape"));
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
    return r.err("attribute 'dimension' is ", dim, ", expected an axis in [0, ", shape.size(), ") for shape ",
                 shape_to_string(shape));
  return AbstractValue{dtype, shape};
}

absl::StatusOr<AbstractValue> rule_convert(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(DType dtype, r.get_dtype("dtype"));
  return AbstractValue{dtype, r.op(0).shape};
}

absl::StatusOr<AbstractValue> rule_broadcast_in_dim(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(Shape shape, r.get_dims("shape"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> bd, r.get_ints("broadcast_dimensions"));
  MCX_RETURN_IF_ERROR(r.check_nonneg_dims(shape, "shape"));
  const AbstractValue& x = r.op(0);
  std::string target = AbstractValue{x.dtype, shape}.to_string();
  if (static_cast<int>(bd.size()) != x.rank())
    return r.err("broadcast_dimensions ", ints_str(bd), " has ", bd.size(), " entries, expected the operand rank ",
                 x.rank(), " of ", x.to_string());
  for (size_t i = 0; i < bd.size(); ++i) {
    if (bd[i] < 0 || bd[i] >= static_cast<int64_t>(shape.size()))
      return r.err("broadcast_dimensions entry ", i, " is ", bd[i], ", out of range for result ", target);
    if (i > 0 && bd[i] <= bd[i - 1])
      return r.err("broadcast_dimensions ", ints_str(bd), " must be strictly increasing");
  }
  for (size_t i = 0; i < bd.size(); ++i) {
    const DimExpr& od = x.shape[i];
    const DimExpr& rd = shape[bd[i]];
    if (!r.eq(od, rd) && od != DimExpr(1))
      return r.err("operand ", x.to_string(), " dim ", i, " is ", od.to_string(), ", expected 1 or result ",
                   target, " dim ", bd[i], " which is ", rd.to_string());
  }
  return AbstractValue{x.dtype, shape};
}

absl::StatusOr<AbstractValue> rule_reshape(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(Shape shape, r.get_dims("shape"));
  MCX_RETURN_IF_ERROR(r.check_nonneg_dims(shape, "shape"));
  const AbstractValue& x = r.op(0);
  DimExpr a = num_elements(x.shape), b = num_elements(shape);
  if (!r.eq(a, b))
    return r.err("element counts differ: operand ", x.to_string(), " has ", a.to_string(), ", shape ",
                 shape_to_string(shape), " has ", b.to_string());
  return AbstractValue{x.dtype, shape};
}

// Checks that v is a permutation-like list of distinct axes in [0, rank).
absl::Status check_axes(const Rule& r, const std::vector<int64_t>& v, int rank, std::string_view attr,
                        bool sorted) {
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= rank)
      return r.err("attribute '", attr, "' ", ints_str(v), " entry ", i, " is ", v[i],
                   ", expected an axis in [0, ", rank, ") for ", r.t(0));
    if (seen[v[i]]) return r.err("attribute '", attr, "' ", ints_str(v), " repeats axis ", v[i]);
    if (sorted && i > 0 && v[i] < v[i - 1]) return r.err("attribute '", attr, "' ", ints_str(v), " must be sorted");
    seen[v[i]] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<AbstractValue> rule_transpose(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> perm, r.get_ints("permutation"));
  const AbstractValue& x = r.op(0);
  if (static_cast<int>(perm.size()) != x.rank())
    return r.err("permutation ", ints_str(perm), " has ", perm.size(), " entries, expected rank ", x.rank(), " of ",
                 x.to_string());
  MCX_RETURN_IF_ERROR(check_axes(r, perm, x.rank(), "permutation", false));
  Shape out;
  for (int64_t p : perm) out.push_back(x.shape[p]);
  return AbstractValue{x.dtype, out};
}

absl::StatusOr<AbstractValue> rule_slice(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(Shape start, r.get_dims("start"));
  MCX_ASSIGN_OR_RETURN(Shape limit, r.get_dims("limit"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> strides, r.get_ints("strides"));
  const AbstractValue& x = r.op(0);
  size_t rank = x.shape.size();
  if (start.size() != rank || limit.size() != rank || strides.size() != rank)
    return r.err("start ", shape_to_string(start), ", limit ", shape_to_string(limit), " and strides ",
                 ints_str(strides), " must each have ", rank, " entries for ", x.to_string());
  Shape out;
  for (size_t i = 0; i < rank; ++i) {
    if (strides[i] < 1) return r.err("stride ", i, " is ", strides[i], ", expected >= 1");
    MCX_ASSIGN_OR_RETURN(bool s_ok, r.ge(start[i], 0, cat("start ", i, " >= 0")));
    if (!s_ok) return r.err("start ", i, " is ", start[i].to_string(), ", expected >= 0");
    MCX_ASSIGN_OR_RETURN(bool l_ok, r.ge(limit[i], start[i], cat("dim ", i, ": limit ", limit[i].to_string(), " >= start ", start[i].to_string())));
    if (!l_ok)
      return r.err("dim ", i, ": limit ", limit[i].to_string(), " is less than start ", start[i].to_string());
    MCX_ASSIGN_OR_RETURN(bool in_ok, r.ge(x.shape[i], limit[i], cat("dim ", i, ": limit ", limit[i].to_string(), " <= operand ", x.to_string(), " dim ", i)));
    if (!in_ok)
      return r.err("dim ", i, ": limit ", limit[i].to_string(), " exceeds operand ", x.to_string(), " dim ",
                   i, " which is ", x.shape[i].to_string());
    DimExpr len = limit[i] - start[i];
    out.push_back(strides[i] == 1 ? len : floordiv(len + DimExpr(strides[i] - 1), DimExpr(strides[i])));
  }
  return AbstractValue{x.dtype, out};
}

absl::Status check_index_scalars(const Rule& r, int first) {
  for (size_t i = first; i < r.ops.size(); ++i) {
    const AbstractValue& v = r.ops[i];
    if (v.rank() != 0 || !is_integer(v.dtype))
      return r.err("start index operand ", i, " must be an integer scalar, found ", v.to_string());
  }
  return absl::OkStatus();
}

absl::StatusOr<AbstractValue> rule_dynamic_slice(const Rule& r) {
  if (r.ops.empty()) return r.err("expects an operand and one start index per dimension, got no operands");
  const AbstractValue& x = r.op(0);
  if (static_cast<int>(r.ops.size()) != 1 + x.rank())
    return r.err("expects 1 + ", x.rank(), " operands (operand and one start index per dimension of ",
                 x.to_string(), "), got ", r.ops.size());
  MCX_RETURN_IF_ERROR(check_index_scalars(r, 1));
  MCX_ASSIGN_OR_RETURN(Shape sizes, r.get_dims("sizes"));
  if (static_cast<int>(sizes.size()) != x.rank())
    return r.err("sizes ", shape_to_string(sizes), " must have ", x.rank(), " entries for ", x.to_string());
  MCX_RETURN_IF_ERROR(r.check_nonneg_dims(sizes, "sizes"));
  for (int i = 0; i < x.rank(); ++i) {
    MCX_ASSIGN_OR_RETURN(bool ok, r.ge(x.shape[i], sizes[i], cat("size ", i, " ", sizes[i].to_string(), " <= operand ", x.to_string(), " dim ", i)));
    if (!ok)
      return r.err("size ", i, " is ", sizes[i].to_string(), ", larger than operand ", x.to_string(), " dim ", i);
  }
  return AbstractValue{x.dtype, sizes};
}

absl::StatusOr<AbstractValue> rule_dynamic_update_slice(const Rule& r) {
  if (r.ops.size() < 2) return r.err("expects operand, update and start indices, got ", r.ops.size(), " operands");
  const AbstractValue& x = r.op(0);
  const AbstractValue& u = r.op(1);
  if (static_cast<int>(r.ops.size()) != 2 + x.rank())
    return r.err("expects 2 + ", x.rank(), " operands (operand, update and one start index per dimension of ",
                 x.to_string(), "), got ", r.ops.size());
  if (u.rank() != x.rank() || u.dtype != x.dtype)
    return r.err("update ", u.to_string(), " must have the rank and dtype of operand ", x.to_string());
  MCX_RETURN_IF_ERROR(check_index_scalars(r, 2));
  for (int i = 0; i < x.rank(); ++i) {
    MCX_ASSIGN_OR_RETURN(bool ok, r.ge(x.shape[i], u.shape[i], cat("update ", u.to_string(), " dim ", i, " <= operand ", x.to_string(), " dim ", i)));
    if (!ok) return r.err("update ", u.to_string(), " dim ", i, " exceeds operand ", x.to_string(), " dim ", i);
  }
  return x;
}

absl::StatusOr<AbstractValue> rule_concatenate(const Rule& r) {
  if (r.ops.empty()) return r.err("expects at least one operand");
  MCX_ASSIGN_OR_RETURN(int64_t dim, r.get_int("dimension"));
  const AbstractValue& x = r.op(0);
  MCX_RETURN_IF_ERROR(r.check_axis(dim, x.rank(), "dimension"));
  Shape out = x.shape;
  for (size_t i = 1; i < r.ops.size(); ++i) {
    const AbstractValue& y = r.ops[i];
    if (y.dtype != x.dtype) return r.err("operand dtypes differ: ", x.to_string(), " vs ", y.to_string());
    if (y.rank() != x.rank()) return r.err("operand ranks differ: ", x.to_string(), " vs ", y.to_string());
    for (int d = 0; d < x.rank(); ++d) {
      if (d == dim) continue;
      if (!r.eq(x.shape[d], y.shape[d]))
        return r.err("operand shapes differ outside dimension ", dim, ": ", x.to_string(), " vs ", y.to_string(),
                     " at dim ", d);
    }
    out[dim] = out[dim] + y.shape[dim];
  }
  return AbstractValue{x.dtype, out};
}

absl::StatusOr<AbstractValue> rule_pad(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(Shape low, r.get_dims("low"));
  MCX_ASSIGN_OR_RETURN(Shape high, r.get_dims("high"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> interior, r.get_ints("interior"));
  const AbstractValue& x = r.op(0);
  const AbstractValue& pv = r.op(1);
  if (pv.rank() != 0 || pv.dtype != x.dtype)
    return r.err("padding value must be a scalar of the operand dtype ", dtype_class_msg(x.dtype), ", found ",
                 pv.to_string());
  size_t rank = x.shape.size();
  if (low.size() != rank || high.size() != rank || interior.size() != rank)
    return r.err("low ", shape_to_string(low), ", high ", shape_to_string(high), " and interior ",
                 ints_str(interior), " must each have ", rank, " entries for ", x.to_string());
  Shape out;
  for (size_t i = 0; i < rank; ++i) {
    if (interior[i] < 0) return r.err("interior ", i, " is ", interior[i], ", expected >= 0");
    DimExpr d = x.shape[i];
    DimExpr body = d;
    if (interior[i] > 0) {
      if (auto c = d.constant_value()) {
        body = DimExpr(*c + std::max<int64_t>(*c - 1, 0) * interior[i]);
      } else {
        MCX_ASSIGN_OR_RETURN(bool pos, r.ge(d, 1, cat("interior padding needs operand ", x.to_string(), " dim ", i, " >= 1")));
        if (!pos) return r.err("dim ", i, " of ", x.to_string(), " may be 0; interior padding needs it >= 1");
        body = d + (d - DimExpr(1)) * DimExpr(interior[i]);
      }
    }
    DimExpr res = low[i] + body + high[i];
    if (auto c = res.constant_value(); c && *c < 0)
      return r.err("dim ", i, " of the result is ", *c, " (low ", low[i].to_string(), ", high ",
                   high[i].to_string(), " on ", x.to_string(), "), expected >= 0");
    out.push_back(res);
  }
  return AbstractValue{x.dtype, out};
}

absl::StatusOr<AbstractValue> rule_reverse(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.get_ints("dimensions"));
  MCX_RETURN_IF_ERROR(check_axes(r, dims, r.op(0).rank(), "dimensions", false));
  return r.op(0);
}

absl::StatusOr<AbstractValue> rule_reduce(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.get_ints("dimensions"));
  const AbstractValue& x = r.op(0);
  if ((r.kind == OpKind::kReduceSum || r.kind == OpKind::kReduceProd) && is_bool(x.dtype))
    return r.err("operand must be numeric, found ", x.to_string());
  MCX_RETURN_IF_ERROR(check_axes(r, dims, x.rank(), "dimensions", true));
  Shape out;
  for (int i = 0; i < x.rank(); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(i))) out.push_back(x.shape[i]);
  return AbstractValue{x.dtype, out};
}

absl::StatusOr<AbstractValue> rule_arg(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(int64_t dim, r.get_int("dimension"));
  MCX_ASSIGN_OR_RETURN(DType idx, r.get_dtype("index_dtype"));
  const AbstractValue& x = r.op(0);
  MCX_RETURN_IF_ERROR(r.check_axis(dim, x.rank(), "dimension"));
  if (!is_integer(idx)) return r.err("index_dtype must be an integer dtype, found ", dtype_short_name(idx));
  Shape out = x.shape;
  out.erase(out.begin() + dim);
  return AbstractValue{idx, out};
}

absl::StatusOr<AbstractValue> rule_dot_general(const Rule& r) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lb, r.get_ints("lhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rb, r.get_ints("rhs_batch"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> lc, r.get_ints("lhs_contracting"));
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> rc, r.get_ints("rhs_contracting"));
  const AbstractValue& l = r.op(0);
  const AbstractValue& h = r.op(1);
  if (l.dtype != h.dtype) return r.err("operand dtypes differ: lhs ", l.to_string(), ", rhs ", h.to_string());
  if (is_bool(l.dtype)) return r.err("operands must be numeric, found ", l.to_string());
  if (lb.size() != rb.size())
    return r.err("batch dimension counts differ: lhs_batch ", ints_str(lb), ", rhs_batch ", ints_str(rb));
  if (lc.size() != rc.size())
    return r.err("contracting dimension counts differ: lhs_contracting ", ints_str(lc), ", rhs_contracting ",
                 ints_str(rc));
  auto check_side = [&](const AbstractValue& v, const std::vector<int64_t>& b, const std::vector<int64_t>& c,
                        std::string_view side) -> absl::Status {
    std::vector<bool> used(v.rank(), false);
    for (const auto* list : {&b, &c}) {
      for (int64_t d : *list) {
        if (d < 0 || d >= v.rank())
          return r.err(side, " dimension ", d, " out of range for ", side, " ", v.to_string());
        if (used[d]) return r.err(side, " dimension ", d, " appears twice in batch/contracting dimensions");
        used[d] = true;
      }
    }
    return absl::OkStatus();
  };
  MCX_RETURN_IF_ERROR(check_side(l, lb, lc, "lhs"));
  MCX_RETURN_IF_ERROR(check_side(h, rb, rc, "rhs"));
  for (size_t i = 0; i < lb.size(); ++i)
    if (!r.eq(l.shape[lb[i]], h.shape[rb[i]]))
      return r.err("batch dimensions differ: lhs ", l.to_string(), " dim ", lb[i], " is ",
                   l.shape[lb[i]].to_string(), ", rhs ", h.to_string(), " dim ", rb[i], " is ",
                   h.shape[rb[i]].to_string());
  for (size_t i = 0; i < lc.size(); ++i)
    if (!r.eq(l.shape[lc[i]], h.shape[rc[i]]))
      return r.err("contracting dimensions differ: lhs ", l.to_string(), " dim ", lc[i], " is ",
                   l.shape[lc[i]].to_string(), ", rhs ", h.to_string(), " dim ", rc[i], " is ",
                   h.shape[rc[i]].to_string());
  Shape out;
  for (int64_t d : lb) out.push_back(l.shape[d]);
  auto add_free = [&](const AbstractValue& v, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
    for (int64_t d = 0; d < v.rank(); ++d)
      if (std::find(b.begin(), b.end(), d) == b.end() && std::find(c.begin(), c.end(), d) == c.end())
        out.push_back(v.shape[d]);
  };
  add_free(l, lb, lc);
  add_free(h, rb, rc);
  return AbstractValue{l.dtype, out};
}

// cumsum and argsort: a numeric operand, an axis of it ("dimension") and a 0/1 attribute named `flag`.
absl::Status check_line_op(const Rule& r, const char* flag) {
  MCX_ASSIGN_OR_RETURN(int64_t dim, r.get_int("dimension"));
  MCX_ASSIGN_OR_RETURN(int64_t value, r.get_int(flag));
  const AbstractValue& x = r.op(0);
  if (is_bool(x.dtype)) return r.err("operand must be numeric, found ", x.to_string());
  MCX_RETURN_IF_ERROR(r.check_axis(dim, x.rank(), "dimension"));
  if (value != 0 && value != 1) return r.err("attribute '", flag, "' is ", value, ", expected 0 or 1");
  return absl::OkStatus();
}

absl::StatusOr<AbstractValue> rule_cumsum(const Rule& r) {
  MCX_RETURN_IF_ERROR(check_line_op(r, "reverse"));
  return r.op(0);
}

absl::StatusOr<AbstractValue> rule_argsort(const Rule& r) {
  MCX_RETURN_IF_ERROR(check_line_op(r, "descending"));
  return AbstractValue{DType::kInt32, r.op(0).shape};
}

absl::StatusOr<AbstractValue> rule_take(const Rule& r) {
  const AbstractValue& x = r.op(0);
  const AbstractValue& idx = r.op(1);
  if (x.rank() < 1) return r.err("operand must have rank >= 1, found ", x.to_string());
  if (!is_integer(idx.dtype)) return r.err("indices must be integer, found ", idx.to_string());
  Shape out = idx.shape;
  out.insert(out.end(), x.shape.begin() + 1, x.shape.end());
  return AbstractValue{x.dtype, out};
}

absl::StatusOr<AbstractValue> rule_scatter_add(const Rule& r) {
  const AbstractValue& x = r.op(0);
  const AbstractValue& idx = r.op(1);
  const AbstractValue& upd = r.op(2);
  if (x.rank() < 1) return r.err("operand must have rank >= 1, found ", x.to_string());
  if (!is_integer(idx.dtype)) return r.err("indices must be integer, found ", idx.to_string());
  if (is_bool(x.dtype)) return r.err("operand must be numeric, found ", x.to_string());
  if (upd.dtype != x.dtype) return r.err("updates dtype differs: operand ", x.to_string(), ", updates ", upd.to_string());
  Shape want = idx.shape;
  want.insert(want.end(), x.shape.begin() + 1, x.shape.end());
  if (!r.same_shape(want, upd.shape))
    return r.err("updates ", upd.to_string(), " must have shape indices.shape + operand.shape[1:] = ",
                 shape_to_string(want), " (operand ", x.to_string(), ", indices ", idx.to_string(), ")");
  return x;
}

absl::StatusOr<AbstractValue> rule_threefry(const Rule& r) {
  const AbstractValue& key = r.op(0);
  const AbstractValue& cnt = r.op(1);
  if (key.dtype != DType::kUInt32 || key.rank() != 1 || key.shape[0] != DimExpr(2))
    return r.err("key must be u32[2], found ", key.to_string());
  if (cnt.dtype != DType::kUInt32 || cnt.rank() < 1 || cnt.shape.back() != DimExpr(2))
    return r.err("counts must be u32[..., 2], found ", cnt.to_string());
  return cnt;
}

}  // namespace

absl::StatusOr<AbstractValue> infer_type(OpKind kind, std::span<const AbstractValue> operands, const Attrs& attrs,
                                         const SymbolicScope& scope) {
  const OpInfo& info = op_info(kind);
  Rule r{kind, info.name, operands, attrs, scope};
  if (info.arity >= 0 && static_cast<int>(operands.size()) != info.arity)
    return r.err("expects ", info.arity, " operand", info.arity == 1 ? "" : "s", ", got ", operands.size());
  std::vector<std::string_view> names = expected_attr_names(kind);
  for (const auto& [name, value] : attrs.entries())
    if (std::find(names.begin(), names.end(), name) == names.end())
      return r.err("unexpected attribute '", name, "'",
                   names.empty() ? std::string(" (takes none)")
                                 : cat(" (expected ", join(names, ", "), ")"));
  if (kind == OpKind::kConvert) return rule_convert(r);
  if (is_elementwise(kind)) return elementwise(r);
  switch (kind) {
    case OpKind::kConstant: return rule_constant(r);
    case OpKind::kIota: return rule_iota(r);
    case OpKind::kBroadcastInDim: return rule_broadcast_in_dim(r);
    case OpKind::kReshape: return rule_reshape(r);
    case OpKind::kTranspose: return rule_transpose(r);
    case OpKind::kSlice: return rule_slice(r);
    case OpKind::kDynamicSlice: return rule_dynamic_slice(r);
    case OpKind::kDynamicUpdateSlice: return rule_dynamic_update_slice(r);
    case OpKind::kConcatenate: return rule_concatenate(r);
    case OpKind::kPad: return rule_pad(r);
    case OpKind::kReverse: return rule_reverse(r);
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: return rule_reduce(r);
    case OpKind::kArgMax:
    case OpKind::kArgMin: return rule_arg(r);
    case OpKind::kDotGeneral: return rule_dot_general(r);
    case OpKind::kCumsum: return rule_cumsum(r);
    case OpKind::kArgsort: return rule_argsort(r);
    case OpKind::kTake: return rule_take(r);
    case OpKind::kScatterAdd: return rule_scatter_add(r);
    case OpKind::kThreefry2x32: return rule_threefry(r);
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
    case OpKind::kAxisIndex:
    case OpKind::kShardingConstraint: return spmd_infer_type(kind, operands, attrs, scope);
    case OpKind::kConvGeneralDilated:
    case OpKind::kReduceWindow: return window_infer_type(kind, operands, attrs, scope);
    case OpKind::kWhile:
    case OpKind::kScan:
    case OpKind::kCond:
    case OpKind::kCustomVjpCall:
    case OpKind::kCustomJvpCall:
    case OpKind::kShardMap: return control_flow_infer_type(kind, operands, attrs, scope);
    case OpKind::kDebugPrint: return debug_print_infer_type(operands, attrs);
    default: break;
  }
  return absl::InternalError(cat("[", info.name, "] no shape rule"));
}

absl::Status verify(const Program& p) {
  const int np = p.num_params();
  std::set<const Program*> verified_regions;  // siblings share their regions: each is verified once
  for (int i = 0; i < np; ++i)
    for (const DimExpr& d : p.params[i].shape)
      if (auto c = d.constant_value(); c && *c < 0)
        return absl::InvalidArgumentError(
            cat("[verify] parameter %", i, " has a negative dimension: ", p.params[i].to_string()));
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& ins = p.instrs[i];
    const ValueId self = np + static_cast<ValueId>(i);
    auto fail = [&](std::string_view msg) {
      return absl::InvalidArgumentError(
          cat("[verify] instruction ", i, " (%", self, " = ", op_name(ins.kind), "): ", msg));
    };
    if (static_cast<int>(ins.kind) >= kNumOpKinds)
      return absl::InvalidArgumentError(cat("[verify] instruction ", i, " has an unknown op kind ",
                                                     static_cast<int>(ins.kind)));
    std::vector<AbstractValue> ops;
    for (ValueId v : ins.operands) {
      if (v < 0 || v >= self)
        return fail(cat("operand %", v, " is not defined before this instruction"));
      ops.push_back(p.type(v));
    }
    auto t = infer_type(ins.kind, ops, ins.attrs, p.scope);
    if (!t.ok()) return fail(std::string(t.status().message()));
    if (*t != ins.type)
      return fail(cat("recorded type ", ins.type.to_string(), " differs from inferred type ",
                               t->to_string()));
    if (has_regions(ins.kind)) {
      auto regions = ins.attrs.get_regions("regions");
      if (!regions.ok()) return fail(std::string(regions.status().message()));
      for (size_t r = 0; r < regions->size(); ++r) {
        const Program* region = (*regions)[r].get();
        if (!verified_regions.insert(region).second) continue;
        if (absl::Status s = verify(*region); !s.ok())
          return fail(cat("region ", r, " (@", region->name, "): ", std::string(s.message())));
      }
    }
  }
  for (size_t i = 0; i < p.results.size(); ++i) {
    ValueId v = p.results[i];
    if (v < 0 || v >= p.num_values())
      return absl::InvalidArgumentError(
          cat("[verify] result ", i, " refers to %", v, ", but the program has ", p.num_values(),
                       " values"));
  }
  return absl::OkStatus();
}

}  // namespace mcx::ir
