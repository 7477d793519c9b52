#include "mcx/ir/batching_rules.h"

#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir::internal {
namespace {

Shape with_batch(const DimExpr& size, const Shape& shape) {
  Shape out{size};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

std::vector<int64_t> shifted(std::vector<int64_t> v) {
  for (int64_t& d : v) ++d;
  return v;
}

// [first, v...]
template <typename T>
std::vector<T> prepend(T first, const std::vector<T>& v) {
  std::vector<T> out{std::move(first)};
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<int64_t> ints(const Instr& instr, const char* name) { return value_or_throw(instr.attrs.get_ints(name)); }
int64_t int_attr(const Instr& instr, const char* name) { return value_or_throw(instr.attrs.get_int(name)); }
Shape dims_attr(const Instr& instr, const char* name) { return value_or_throw(instr.attrs.get_dims(name)); }

// Moves axis `from` of x to the front.
ValueId to_front(ProgramBuilder& b, ValueId x, int64_t from) {
  if (from == 0) return x;
  std::vector<int64_t> perm{from};
  for (int64_t d = 0; d < b.type(x).rank(); ++d) {
    if (d != from) perm.push_back(d);
  }
  return b.transpose(x, std::move(perm));
}

// Moves the front axis of x to position `to`.
ValueId from_front(ProgramBuilder& b, ValueId x, int64_t to) {
  if (to == 0) return x;
  std::vector<int64_t> perm;
  for (int64_t d = 1; d <= to; ++d) perm.push_back(d);
  perm.push_back(0);
  for (int64_t d = to + 1; d < b.type(x).rank(); ++d) perm.push_back(d);
  return b.transpose(x, std::move(perm));
}

// Every operand batched: the unbatched ones are broadcast.
std::vector<ValueId> all_batched(ProgramBuilder& b, std::span<const ValueId> operands, const std::vector<bool>& batched,
                                 const DimExpr& size) {
  std::vector<ValueId> out;
  for (size_t k = 0; k < operands.size(); ++k) {
    out.push_back(batched[k] ? operands[k] : broadcast_batch(b, operands[k], size));
  }
  return out;
}

// The op emitted once per batch index on the operands' slices, the results stacked along axis 0.
ValueId unrolled(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                 const std::vector<bool>& batched, const DimExpr& size) {
  const std::optional<int64_t> n = size.constant_value();
  if (!n) {
    throw Unimplemented(cat("[vmap] ", op_name(instr.kind),
                            " is batched by running it once per batch index here, which needs a concrete batch "
                            "size; found the symbolic size ",
                            size.to_string()));
  }
  std::vector<ValueId> pieces;
  for (int64_t i = 0; i < *n; ++i) {
    std::vector<ValueId> ops;
    for (size_t k = 0; k < operands.size(); ++k) {
      if (!batched[k]) {
        ops.push_back(operands[k]);
        continue;
      }
      const Shape full = b.type(operands[k]).shape;
      Shape start(full.size(), DimExpr(0)), limit = full;
      start[0] = DimExpr(i);
      limit[0] = DimExpr(i + 1);
      ValueId s = b.emit_or_throw(OpKind::kSlice, {operands[k]},
                                  {{"start", start}, {"limit", limit}, {"strides", std::vector<int64_t>(full.size(), 1)}});
      ops.push_back(b.reshape(s, Shape(full.begin() + 1, full.end())));
    }
    ValueId r = b.emit_or_throw(instr.kind, std::move(ops), instr.attrs);
    const Shape rs = b.type(r).shape;
    pieces.push_back(b.reshape(r, with_batch(DimExpr(1), rs)));
  }
  if (pieces.size() == 1) return pieces[0];
  return b.emit_or_throw(OpKind::kConcatenate, std::move(pieces), {{"dimension", int64_t{0}}});
}

// The op on its operands (all batched) with the given attributes.
ValueId with_attrs(ProgramBuilder& b, const Instr& instr, std::vector<ValueId> operands, Attrs attrs) {
  return b.emit_or_throw(instr.kind, std::move(operands), std::move(attrs));
}

ValueId dot_general_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> ops,
                         const std::vector<bool>& batched) {
  std::vector<int64_t> lb = ints(instr, "lhs_batch"), rb = ints(instr, "rhs_batch");
  std::vector<int64_t> lc = ints(instr, "lhs_contracting"), rc = ints(instr, "rhs_contracting");
  const int64_t lhs_rank = b.type(ops[0]).rank() - (batched[0] ? 1 : 0);
  Attrs attrs = instr.attrs;
  if (batched[0] && batched[1]) {
    // The batch axis becomes the first batch dimension of the product, hence the result's axis 0.
    attrs.set("lhs_batch", prepend<int64_t>(0, shifted(lb)));
    attrs.set("rhs_batch", prepend<int64_t>(0, shifted(rb)));
    attrs.set("lhs_contracting", shifted(lc));
    attrs.set("rhs_contracting", shifted(rc));
    return with_attrs(b, instr, {ops[0], ops[1]}, std::move(attrs));
  }
  // One operand batched: its batch axis is that operand's first free dimension; result dims are the batch
  // dims, then lhs free dims, then rhs free dims.
  const int64_t nb = static_cast<int64_t>(lb.size());
  int64_t position = nb;
  if (batched[0]) {
    attrs.set("lhs_batch", shifted(lb));
    attrs.set("lhs_contracting", shifted(lc));
  } else {
    attrs.set("rhs_batch", shifted(rb));
    attrs.set("rhs_contracting", shifted(rc));
    position += lhs_rank - nb - static_cast<int64_t>(lc.size());
  }
  return to_front(b, with_attrs(b, instr, {ops[0], ops[1]}, std::move(attrs)), position);
}

// take(x[N, ...], idx[k...]) with x batched and idx not: the batch axis moves behind the indexed axis.
ValueId take_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> ops) {
  const int64_t idx_rank = b.type(ops[1]).rank();
  ValueId x = from_front(b, ops[0], 1);  // [N, B, ...]
  ValueId r = b.emit_or_throw(instr.kind, {x, ops[1]}, instr.attrs);  // [k..., B, ...]
  return to_front(b, r, idx_rank);
}

// scatter_add(x[N, ...], idx[k...], upd[k..., ...]) with idx unbatched.
ValueId scatter_add_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> ops, const DimExpr& size,
                         const std::vector<bool>& batched) {
  const int64_t idx_rank = b.type(ops[1]).rank();
  ValueId x = batched[0] ? ops[0] : broadcast_batch(b, ops[0], size);
  ValueId upd = batched[2] ? ops[2] : broadcast_batch(b, ops[2], size);
  ValueId r = b.emit_or_throw(instr.kind, {from_front(b, x, 1), ops[1], from_front(b, upd, idx_rank)}, instr.attrs);
  return to_front(b, r, 1);
}

// conv_general_dilated with the image batched and the kernel shared: the batch axis is merged into the
// image's batch dimension (one convolution of B * N images) and split off the result's batch dimension.
ValueId conv_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> ops, const DimExpr& size) {
  const int64_t lhs_batch_dim = ints(instr, "lhs_spec")[0];
  const int64_t out_batch_dim = ints(instr, "out_spec")[0];
  ValueId x = from_front(b, ops[0], lhs_batch_dim);  // [..., B, N, ...]
  Shape merged = b.type(x).shape;
  const DimExpr n = merged[static_cast<size_t>(lhs_batch_dim) + 1];
  merged[static_cast<size_t>(lhs_batch_dim)] = size * n;
  merged.erase(merged.begin() + lhs_batch_dim + 1);
  ValueId r = b.emit_or_throw(instr.kind, {b.reshape(x, merged), ops[1]}, instr.attrs);
  Shape split = b.type(r).shape;
  split[static_cast<size_t>(out_batch_dim)] = size;
  split.insert(split.begin() + out_batch_dim + 1, n);
  return to_front(b, b.reshape(r, split), out_batch_dim);
}

// The sharding_constraint's encoded PartitionSpec with an unconstrained leading dimension.
std::vector<int64_t> sharding_with_batch(const std::vector<int64_t>& spec) { return prepend<int64_t>(-1, spec); }

}  // namespace

ValueId broadcast_batch(ProgramBuilder& b, ValueId x, const DimExpr& size) {
  const AbstractValue t = b.type(x);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.rank(); ++d) dims.push_back(d + 1);
  return b.broadcast_in_dim(x, with_batch(size, t.shape), std::move(dims));
}

ValueId emit_batching_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                           const std::vector<bool>& batched, const DimExpr& size) {
  const OpKind k = instr.kind;
  if (is_elementwise(k) || k == OpKind::kConvert || k == OpKind::kIsFinite || k == OpKind::kAllReduce ||
      k == OpKind::kCollectivePermute) {
    return b.emit_or_throw(k, all_batched(b, operands, batched, size), instr.attrs);
  }
  if (k == OpKind::kDebugPrint) {  // prints the batched values as they are (batch axis first)
    const ValueId token = b.emit_or_throw(k, std::vector<ValueId>(operands.begin(), operands.end()), instr.attrs);
    return broadcast_batch(b, token, size);
  }
  Attrs a = instr.attrs;
  const ValueId x = operands[0];
  switch (k) {
    case OpKind::kBroadcastInDim:
      a.set("shape", with_batch(size, dims_attr(instr, "shape")));
      a.set("broadcast_dimensions", prepend<int64_t>(0, shifted(ints(instr, "broadcast_dimensions"))));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kReshape:
      a.set("shape", with_batch(size, dims_attr(instr, "shape")));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kTranspose:
      a.set("permutation", prepend<int64_t>(0, shifted(ints(instr, "permutation"))));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kSlice: {
      a.set("start", prepend<DimExpr>(DimExpr(0), dims_attr(instr, "start")));
      a.set("limit", with_batch(size, dims_attr(instr, "limit")));
      std::vector<int64_t> strides = ints(instr, "strides");
      if (!strides.empty()) a.set("strides", prepend<int64_t>(1, strides));
      return with_attrs(b, instr, {x}, std::move(a));
    }
    case OpKind::kReverse:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd:
      a.set("dimensions", shifted(ints(instr, "dimensions")));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kArgMax:
    case OpKind::kArgMin:
    case OpKind::kCumsum:
    case OpKind::kArgsort:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      a.set("dimension", int_attr(instr, "dimension") + 1);
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kAllToAll:
      a.set("split_dimension", int_attr(instr, "split_dimension") + 1);
      a.set("concat_dimension", int_attr(instr, "concat_dimension") + 1);
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kShardingConstraint:
      a.set("sharding", sharding_with_batch(ints(instr, "sharding")));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kConcatenate:
      a.set("dimension", int_attr(instr, "dimension") + 1);
      return with_attrs(b, instr, all_batched(b, operands, batched, size), std::move(a));
    case OpKind::kPad: {
      if (batched[1]) break;  // a padding value per batch index: unrolled
      a.set("low", prepend<DimExpr>(DimExpr(0), dims_attr(instr, "low")));
      a.set("high", prepend<DimExpr>(DimExpr(0), dims_attr(instr, "high")));
      std::vector<int64_t> interior = ints(instr, "interior");
      if (!interior.empty()) a.set("interior", prepend<int64_t>(0, interior));
      return with_attrs(b, instr, {x, operands[1]}, std::move(a));
    }
    case OpKind::kReduceWindow:
      a.set("window_dimensions", prepend<int64_t>(1, ints(instr, "window_dimensions")));
      a.set("window_strides", prepend<int64_t>(1, ints(instr, "window_strides")));
      a.set("padding_low", prepend<DimExpr>(DimExpr(0), dims_attr(instr, "padding_low")));
      a.set("padding_high", prepend<DimExpr>(DimExpr(0), dims_attr(instr, "padding_high")));
      return with_attrs(b, instr, {x}, std::move(a));
    case OpKind::kDynamicSlice:
    case OpKind::kDynamicUpdateSlice: {
      const size_t first_start = k == OpKind::kDynamicSlice ? 1 : 2;
      bool starts_batched = false;
      for (size_t s = first_start; s < operands.size(); ++s) starts_batched = starts_batched || batched[s];
      if (starts_batched) break;  // a start per batch index: unrolled
      std::vector<ValueId> ops = all_batched(b, operands.subspan(0, first_start),
                                             std::vector<bool>(batched.begin(), batched.begin() + first_start), size);
      const DType start_type = operands.size() > first_start ? b.type(operands[first_start]).dtype : DType::kInt32;
      ops.push_back(b.scalar_constant(start_type, 0));
      ops.insert(ops.end(), operands.begin() + static_cast<std::ptrdiff_t>(first_start), operands.end());
      if (k == OpKind::kDynamicSlice) a.set("sizes", with_batch(size, dims_attr(instr, "sizes")));
      return with_attrs(b, instr, std::move(ops), std::move(a));
    }
    case OpKind::kDotGeneral:
      return dot_general_rule(b, instr, operands, batched);
    case OpKind::kConvGeneralDilated:
      if (!batched[1]) return conv_rule(b, instr, operands, size);
      break;  // per-example kernels: unrolled
    case OpKind::kTake:
      if (!batched[1]) return take_rule(b, instr, operands);
      if (!batched[0]) return b.emit_or_throw(k, {x, operands[1]}, instr.attrs);  // rows for [B, k...] indices
      break;
    case OpKind::kScatterAdd:
      if (!batched[1]) return scatter_add_rule(b, instr, operands, size, batched);
      break;
    case OpKind::kThreefry2x32:
      if (!batched[0]) return b.emit_or_throw(k, {x, operands[1]}, instr.attrs);  // counts [B, ..., 2]
      break;
    default:
      break;
  }
  return unrolled(b, instr, operands, batched, size);
}

}  // namespace mcx::ir::internal
