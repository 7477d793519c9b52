#include "mcx/ir/vjp_rules.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir::internal {
namespace {

constexpr ValueId kNone = -1;

// Small emitters over ProgramBuilder that keep the rules readable.
struct E {
  ProgramBuilder& b;

  // By value: emitting may reallocate the builder's instruction list.
  AbstractValue type(ValueId v) const { return b.type(v); }
  Shape shape(ValueId v) const { return b.type(v).shape; }
  ValueId add(ValueId x, ValueId y) { return b.binary(OpKind::kAdd, x, y); }
  ValueId sub(ValueId x, ValueId y) { return b.binary(OpKind::kSub, x, y); }
  ValueId mul(ValueId x, ValueId y) { return b.binary(OpKind::kMul, x, y); }
  ValueId div(ValueId x, ValueId y) { return b.binary(OpKind::kDiv, x, y); }
  ValueId neg(ValueId x) { return b.unary(OpKind::kNeg, x); }
  ValueId un(OpKind k, ValueId x) { return b.unary(k, x); }
  ValueId bin(OpKind k, ValueId x, ValueId y) { return b.binary(k, x, y); }
  ValueId c(ValueId like, double v) { return b.full_like(like, v); }
  ValueId zeros(ValueId like) { return b.full_like(like, 0.0); }
  ValueId sel(ValueId p, ValueId t, ValueId f) { return b.select(p, t, f); }
  // x * constant
  ValueId scale(ValueId x, double k) { return mul(x, c(x, k)); }
  ValueId bool_to(ValueId p, ValueId like) { return b.convert(p, type(like).dtype); }

  ValueId slice(ValueId x, Shape start, Shape limit, std::vector<int64_t> strides) {
    return b.emit_or_throw(OpKind::kSlice, {x},
                           {{"start", std::move(start)}, {"limit", std::move(limit)}, {"strides", std::move(strides)}});
  }
  ValueId pad(ValueId x, ValueId pv, Shape low, Shape high, std::vector<int64_t> interior) {
    return b.emit_or_throw(OpKind::kPad, {x, pv},
                           {{"low", std::move(low)}, {"high", std::move(high)}, {"interior", std::move(interior)}});
  }
  ValueId dot(ValueId l, ValueId r, std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
              std::vector<int64_t> rc) {
    return b.emit_or_throw(OpKind::kDotGeneral, {l, r},
                           {{"lhs_batch", std::move(lb)},
                            {"rhs_batch", std::move(rb)},
                            {"lhs_contracting", std::move(lc)},
                            {"rhs_contracting", std::move(rc)}});
  }
  ValueId reduce(OpKind k, ValueId x, std::vector<int64_t> dims) {
    return b.emit_or_throw(k, {x}, {{"dimensions", std::move(dims)}});
  }
  // Broadcasts a reduction result (x's shape minus dims) back to full's shape.
  ValueId unreduce(ValueId r, const Shape& full, const std::vector<int64_t>& dims) {
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < static_cast<int64_t>(full.size()); ++d) {
      if (!std::binary_search(dims.begin(), dims.end(), d)) kept.push_back(d);
    }
    return b.broadcast_in_dim(r, full, kept);
  }
  // Reshapes v to `like`'s shape when the shapes differ only in their DimExpr spelling.
  ValueId fit(ValueId v, ValueId like) {
    if (shape(v) == shape(like)) return v;
    return b.reshape(v, shape(like));
  }
};

std::vector<int64_t> iota_vec(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<int64_t> argsort(const std::vector<int64_t>& v) {
  std::vector<int64_t> idx = iota_vec(static_cast<int64_t>(v.size()));
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t c) { return v[a] < v[c]; });
  return idx;
}

std::vector<int64_t> remaining(int64_t rank, const std::vector<int64_t>& a, const std::vector<int64_t>& c) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(a.begin(), a.end(), d) == a.end() && std::find(c.begin(), c.end(), d) == c.end()) {
      out.push_back(d);
    }
  }
  return out;
}

std::vector<int64_t> ints(const Instr& in, std::string_view name) { return value_or_throw(in.attrs.get_ints(name)); }
Shape dims(const Instr& in, std::string_view name) { return value_or_throw(in.attrs.get_dims(name)); }
int64_t int_attr(const Instr& in, std::string_view name) { return value_or_throw(in.attrs.get_int(name)); }

// Cotangent of x in dot_general(x, y) (JAX's _dot_general_transpose_lhs). When swap_ans, x is the
// original rhs, i.e. the result layout is (batch, y_kept, x_kept).
ValueId dot_transpose_lhs(E& e, ValueId g, ValueId x, ValueId y, const std::vector<int64_t>& x_contract,
                          const std::vector<int64_t>& y_contract, const std::vector<int64_t>& x_batch,
                          const std::vector<int64_t>& y_batch, bool swap_ans) {
  const int64_t x_rank = e.type(x).rank(), y_rank = e.type(y).rank();
  std::vector<int64_t> x_kept = remaining(x_rank, x_contract, x_batch);
  std::vector<int64_t> y_kept = remaining(y_rank, y_contract, y_batch);
  const int64_t nb = static_cast<int64_t>(x_batch.size());
  std::vector<int64_t> ans_batch = iota_vec(nb);
  std::vector<int64_t> ans_y = swap_ans ? iota_vec(static_cast<int64_t>(y_kept.size()), nb)
                                        : iota_vec(static_cast<int64_t>(y_kept.size()),
                                                   nb + static_cast<int64_t>(x_kept.size()));
  // g contracts its y_kept dims with y's kept dims and batches with y's batch dims. The result is
  // (batch, x_kept, y's contracting dims in increasing order).
  std::vector<int64_t> order = argsort(y_contract);
  std::vector<int64_t> layout = x_batch;
  layout.insert(layout.end(), x_kept.begin(), x_kept.end());
  for (int64_t k : order) layout.push_back(x_contract[k]);
  std::vector<int64_t> perm = argsort(layout);
  if (perm != iota_vec(x_rank)) {
    // With the operands swapped the result is (batch, y's contracting dims, x_kept): when that is x's
    // layout already (the weight gradient of x @ w, for instance), no transpose is needed.
    std::vector<int64_t> swapped = x_batch;
    for (int64_t k : order) swapped.push_back(x_contract[k]);
    swapped.insert(swapped.end(), x_kept.begin(), x_kept.end());
    if (argsort(swapped) == iota_vec(x_rank)) return e.fit(e.dot(y, g, y_batch, ans_batch, y_kept, ans_y), x);
  }
  ValueId r = e.dot(g, y, ans_batch, y_batch, ans_y, y_kept);
  if (perm != iota_vec(x_rank)) r = e.b.transpose(r, perm);
  return e.fit(r, x);
}

// max/min: the cotangent goes to the operand equal to the result, split evenly on ties (as JAX).
std::vector<ValueId> minmax_rule(E& e, ValueId x, ValueId y, ValueId z, ValueId ct, const std::vector<bool>& need) {
  ValueId xe = e.bin(OpKind::kEq, x, z), ye = e.bin(OpKind::kEq, y, z);
  ValueId half = e.scale(ct, 0.5), zero = e.zeros(ct);
  std::vector<ValueId> out(2, kNone);
  if (need[0]) out[0] = e.sel(xe, e.sel(ye, half, ct), zero);
  if (need[1]) out[1] = e.sel(ye, e.sel(xe, half, ct), zero);
  return out;
}

std::vector<ValueId> unary_rule(E& e, OpKind k, ValueId x, ValueId y, ValueId ct) {
  ValueId g = kNone;
  switch (k) {
    case OpKind::kNeg: g = e.neg(ct); break;
    case OpKind::kRematBarrier: g = ct; break;
    case OpKind::kAbs: g = e.mul(ct, e.un(OpKind::kSign, x)); break;
    case OpKind::kExp: g = e.mul(ct, y); break;
    case OpKind::kLog: g = e.div(ct, x); break;
    case OpKind::kLog1p: g = e.div(ct, e.add(x, e.c(x, 1.0))); break;
    case OpKind::kExpm1: g = e.mul(ct, e.add(y, e.c(y, 1.0))); break;
    case OpKind::kTanh: g = e.mul(ct, e.sub(e.c(y, 1.0), e.mul(y, y))); break;
    case OpKind::kLogistic: g = e.mul(ct, e.mul(y, e.sub(e.c(y, 1.0), y))); break;
    case OpKind::kSqrt: g = e.div(e.scale(ct, 0.5), y); break;
    case OpKind::kRsqrt: g = e.mul(e.scale(ct, -0.5), e.div(y, x)); break;  // d x^-1/2 = -x^-3/2 / 2
    case OpKind::kSin: g = e.mul(ct, e.un(OpKind::kCos, x)); break;
    case OpKind::kCos: g = e.neg(e.mul(ct, e.un(OpKind::kSin, x))); break;
    case OpKind::kErf:  // d erf(x) = 2 / sqrt(pi) * exp(-x^2)
      g = e.mul(e.scale(ct, 2.0 / std::sqrt(std::numbers::pi)), e.un(OpKind::kExp, e.neg(e.mul(x, x))));
      break;
    case OpKind::kErfc:  // d erfc(x) = -2 / sqrt(pi) * exp(-x^2)
      g = e.mul(e.scale(ct, -2.0 / std::sqrt(std::numbers::pi)), e.un(OpKind::kExp, e.neg(e.mul(x, x))));
      break;
    case OpKind::kErfInv:  // d erf_inv(x) = sqrt(pi) / 2 * exp(erf_inv(x)^2)
      g = e.mul(e.scale(ct, std::sqrt(std::numbers::pi) / 2.0), e.un(OpKind::kExp, e.mul(y, y)));
      break;
    case OpKind::kConvert:
      // Only floating -> floating conversions carry cotangents (autodiff marks integer values inactive).
      if (is_floating(e.type(x).dtype)) g = e.b.convert(ct, e.type(x).dtype);
      break;
    default: break;
  }
  return {g};
}

std::vector<ValueId> binary_rule(E& e, OpKind k, ValueId x, ValueId y, ValueId z, ValueId ct,
                                 const std::vector<bool>& need) {
  std::vector<ValueId> out(2, kNone);
  switch (k) {
    case OpKind::kAdd:
      if (need[0]) out[0] = ct;
      if (need[1]) out[1] = ct;
      break;
    case OpKind::kSub:
      if (need[0]) out[0] = ct;
      if (need[1]) out[1] = e.neg(ct);
      break;
    case OpKind::kMul:
      if (need[0]) out[0] = e.mul(ct, y);
      if (need[1]) out[1] = e.mul(x, ct);
      break;
    case OpKind::kDiv:
      if (need[0]) out[0] = e.div(ct, y);
      if (need[1]) out[1] = e.neg(e.div(e.mul(ct, z), y));  // -ct * x / y^2
      break;
    case OpKind::kRem: {  // rem(x, y) = x - y * trunc(x / y)
      if (need[0]) out[0] = ct;
      if (need[1]) {
        ValueId q = e.div(x, y);
        ValueId trunc = e.mul(e.un(OpKind::kSign, q), e.un(OpKind::kFloor, e.un(OpKind::kAbs, q)));
        out[1] = e.neg(e.mul(ct, trunc));
      }
      break;
    }
    case OpKind::kPow: {  // as JAX: d/dx = y * x^(y-1) (0 where y == 0); d/dy = z * log(x) (x == 0 -> 1)
      if (need[0]) {
        ValueId y_is_0 = e.bin(OpKind::kEq, y, e.zeros(y));
        ValueId jac = e.mul(y, e.bin(OpKind::kPow, x, e.sub(y, e.c(y, 1.0))));
        out[0] = e.mul(ct, e.sel(y_is_0, e.zeros(y), jac));
      }
      if (need[1]) {
        ValueId x_is_0 = e.bin(OpKind::kEq, x, e.zeros(x));
        ValueId safe_x = e.sel(x_is_0, e.c(x, 1.0), x);
        out[1] = e.mul(ct, e.mul(z, e.un(OpKind::kLog, safe_x)));
      }
      break;
    }
    case OpKind::kMax:
    case OpKind::kMin: return minmax_rule(e, x, y, z, ct, need);
    default: break;
  }
  return out;
}

std::vector<ValueId> shape_rule(E& e, const Instr& in, std::span<const ValueId> ops, ValueId z, ValueId ct,
                                const std::vector<bool>& need) {
  const size_t n = ops.size();
  std::vector<ValueId> out(n, kNone);
  const ValueId x = ops[0];
  const Shape xs = e.shape(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  switch (in.kind) {
    case OpKind::kBroadcastInDim: {
      const std::vector<int64_t> bd = ints(in, "broadcast_dimensions");
      const Shape zs = e.shape(z);
      std::vector<int64_t> sum_dims;
      for (int64_t d = 0; d < static_cast<int64_t>(zs.size()); ++d) {
        auto it = std::find(bd.begin(), bd.end(), d);
        if (it == bd.end()) {
          sum_dims.push_back(d);
        } else {
          const DimExpr& od = xs[it - bd.begin()];
          if (od == DimExpr(1) && zs[d] != DimExpr(1)) sum_dims.push_back(d);
        }
      }
      ValueId g = sum_dims.empty() ? ct : e.reduce(OpKind::kReduceSum, ct, sum_dims);
      out[0] = e.fit(g, x);
      break;
    }
    case OpKind::kReshape: out[0] = e.b.reshape(ct, xs); break;
    case OpKind::kTranspose: out[0] = e.b.transpose(ct, argsort(ints(in, "permutation"))); break;
    case OpKind::kReverse:
      out[0] = e.b.emit_or_throw(OpKind::kReverse, {ct}, {{"dimensions", ints(in, "dimensions")}});
      break;
    case OpKind::kSlice: {
      // Pad the cotangent back: zeros before start, between strided elements and after the last one.
      const Shape start = dims(in, "start");
      const std::vector<int64_t> strides = ints(in, "strides");
      const Shape zs = e.shape(z);
      Shape high(rank);
      std::vector<int64_t> interior(rank);
      for (int64_t d = 0; d < rank; ++d) {
        interior[d] = strides[d] - 1;
        // Extent covered by the padded cotangent: n + (n - 1) * (stride - 1), or 0 when n == 0.
        DimExpr covered = zs[d].constant_value() == 0 ? DimExpr(0)
                                                       : zs[d] + (zs[d] - DimExpr(1)) * DimExpr(strides[d] - 1);
        high[d] = xs[d] - start[d] - covered;
      }
      out[0] = e.fit(e.pad(ct, e.b.scalar_constant(e.type(ct).dtype, 0.0), start, high, interior), x);
      break;
    }
    case OpKind::kDynamicSlice: {
      std::vector<ValueId> args = {e.zeros(x), ct};
      args.insert(args.end(), ops.begin() + 1, ops.end());
      out[0] = e.b.emit_or_throw(OpKind::kDynamicUpdateSlice, args);
      break;
    }
    case OpKind::kDynamicUpdateSlice: {
      const ValueId u = ops[1];
      if (need[0]) {
        std::vector<ValueId> args = {ct, e.zeros(u)};
        args.insert(args.end(), ops.begin() + 2, ops.end());
        out[0] = e.b.emit_or_throw(OpKind::kDynamicUpdateSlice, args);
      }
      if (need[1]) {
        std::vector<ValueId> args = {ct};
        args.insert(args.end(), ops.begin() + 2, ops.end());
        out[1] = e.b.emit_or_throw(OpKind::kDynamicSlice, args, {{"sizes", e.shape(u)}});
      }
      break;
    }
    case OpKind::kConcatenate: {
      const int64_t dim = int_attr(in, "dimension");
      DimExpr offset(0);
      for (size_t i = 0; i < n; ++i) {
        const Shape s = e.shape(ops[i]);
        if (need[i]) {
          Shape start(s.size(), DimExpr(0)), limit = e.shape(ct);
          start[dim] = offset;
          limit[dim] = offset + s[dim];
          out[i] = e.fit(e.slice(ct, start, limit, std::vector<int64_t>(s.size(), 1)), ops[i]);
        }
        offset = offset + s[dim];
      }
      break;
    }
    case OpKind::kPad: {  // JAX's _pad_transpose
      const Shape low = dims(in, "low"), high = dims(in, "high");
      const std::vector<int64_t> interior = ints(in, "interior");
      ValueId dx = kNone;
      if (need[0] || need[1]) {
        Shape nlow(rank), nhigh(rank), zero(rank, DimExpr(0));
        std::vector<int64_t> step(rank);
        for (int64_t d = 0; d < rank; ++d) {
          nlow[d] = -low[d];
          nhigh[d] = -high[d];
          step[d] = interior[d] + 1;
        }
        ValueId unpadded = e.pad(ct, e.b.scalar_constant(e.type(ct).dtype, 0.0), nlow, nhigh,
                                 std::vector<int64_t>(rank, 0));
        dx = e.fit(e.slice(unpadded, zero, e.shape(unpadded), step), x);
      }
      if (need[0]) out[0] = dx;
      if (need[1]) {
        std::vector<int64_t> all = iota_vec(rank);
        ValueId total = rank ? e.reduce(OpKind::kReduceSum, ct, all) : ct;
        ValueId inner = rank ? e.reduce(OpKind::kReduceSum, dx, all) : dx;
        out[1] = e.sub(total, inner);
      }
      break;
    }
    default: break;
  }
  return out;
}

std::vector<ValueId> reduce_rule(E& e, const Instr& in, ValueId x, ValueId z, ValueId ct) {
  const std::vector<int64_t> rd = ints(in, "dimensions");
  const Shape xs = e.shape(x);
  ValueId ct_b = e.unreduce(ct, xs, rd);
  switch (in.kind) {
    case OpKind::kReduceSum: return {ct_b};
    case OpKind::kReduceMax:
    case OpKind::kReduceMin: {
      // Split evenly among the elements equal to the extreme (JAX's _reduce_chooser_jvp_rule).
      ValueId mask = e.bool_to(e.bin(OpKind::kEq, x, e.unreduce(z, xs, rd)), x);
      ValueId count = e.reduce(OpKind::kReduceSum, mask, rd);
      return {e.mul(e.unreduce(e.div(ct, count), xs, rd), mask)};
    }
    case OpKind::kReduceProd: {
      // d prod / d x_i = product of the other elements: z / x_i where x_i != 0; where x_i is the only
      // zero of its group, the product of the non-zero elements; 0 where there are several zeros.
      ValueId is0 = e.bin(OpKind::kEq, x, e.zeros(x));
      ValueId nz = e.sel(is0, e.c(x, 1.0), x);
      ValueId prod_nz = e.unreduce(e.reduce(OpKind::kReduceProd, nz, rd), xs, rd);
      ValueId zeros = e.unreduce(e.reduce(OpKind::kReduceSum, e.bool_to(is0, x), rd), xs, rd);
      ValueId one_zero = e.bin(OpKind::kEq, zeros, e.c(x, 1.0));
      ValueId at_zero = e.sel(one_zero, prod_nz, e.zeros(x));
      ValueId others = e.sel(is0, at_zero, e.div(e.unreduce(z, xs, rd), nz));
      return {e.mul(ct_b, others)};
    }
    default: return {kNone};
  }
}

// SPMD ops (op.h), in the pmap convention: each partition receives the cotangent of its own result, and
// the rule returns each partition's cotangent of its own operand, so that for
// F(x_0..x_{N-1}) = sum_d <ct_d, z_d> the program computes dF/dx_d on partition d.
// The elementwise product of x over the *other* members of x's replica group (exact with zeros: no
// division). Each member gathers the group's values along a new leading dimension, replaces its own row
// by ones and multiplies the rows. Its own row is found from its partition id (axis_index over all N
// partitions) through a constant table: partition id -> position in its group.
ValueId product_of_others(E& e, ValueId x, const std::vector<int64_t>& groups, int64_t group_size) {
  ProgramBuilder& b = e.b;
  const int64_t n = static_cast<int64_t>(groups.size());
  std::vector<int32_t> position(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) position[static_cast<size_t>(groups[i])] = static_cast<int32_t>(i % group_size);
  ValueId table = b.constant(Buffer::from_vector<int32_t>(position, {n}));
  ValueId pid = b.emit_or_throw(OpKind::kAxisIndex, {}, {{"mesh_shape", std::vector<int64_t>{n}}, {"axis", int64_t{0}}});
  ValueId rank = b.emit_or_throw(OpKind::kTake, {table, pid});
  const Shape xs = e.type(x).shape;
  Shape one = xs, stacked = xs;
  one.insert(one.begin(), DimExpr(1));
  stacked.insert(stacked.begin(), DimExpr(group_size));
  ValueId gathered = b.emit_or_throw(OpKind::kAllGather, {b.reshape(x, one)}, all_gather_attrs(0, groups, group_size));
  ValueId rows = b.emit_or_throw(OpKind::kIota, {},
                                 {{"dtype", DType::kInt32}, {"shape", stacked}, {"dimension", int64_t{0}}});
  ValueId own = e.bin(OpKind::kEq, rows, b.broadcast_in_dim(rank, stacked, {}));
  ValueId others = b.select(own, b.full_like(gathered, 1.0), gathered);
  return e.reduce(OpKind::kReduceProd, others, {0});
}

ValueId spmd_rule(E& e, const Instr& in, ValueId x, ValueId z, ValueId ct) {
  ProgramBuilder& b = e.b;
  const std::string_view name = op_name(in.kind);
  auto groups = [&] { return ints(in, "replica_groups"); };
  auto group_size = [&] { return int_attr(in, "group_size"); };
  switch (in.kind) {
    case OpKind::kAllReduce: {
      const ReduceOp op = value_or_throw(get_reduce_op(name, in.attrs));
      ValueId total = b.emit_or_throw(OpKind::kAllReduce, {ct}, all_reduce_attrs(ReduceOp::kSum, groups(), group_size()));
      if (op == ReduceOp::kSum) return total;
      // prod: d(prod_m x_m)/dx_me = the product of the other members' values.
      if (op == ReduceOp::kProd) return e.mul(total, product_of_others(e, x, groups(), group_size()));
      // max/min: the summed cotangent goes to every member whose operand equals the result.
      return e.sel(e.bin(OpKind::kEq, x, z), total, e.zeros(ct));
    }
    case OpKind::kAllGather:
      return b.emit_or_throw(OpKind::kReduceScatter, {ct},
                             reduce_scatter_attrs(int_attr(in, "dimension"), ReduceOp::kSum, groups(), group_size()));
    case OpKind::kReduceScatter: {
      const ReduceOp op = value_or_throw(get_reduce_op(name, in.attrs));
      const int64_t d = int_attr(in, "dimension");
      ValueId all_ct = b.emit_or_throw(OpKind::kAllGather, {ct}, all_gather_attrs(d, groups(), group_size()));
      if (op == ReduceOp::kSum) return e.fit(all_ct, x);
      // prod: block j of x goes to member j's product; its cotangent arrives through all_ct.
      if (op == ReduceOp::kProd) return e.fit(e.mul(e.fit(all_ct, x), product_of_others(e, x, groups(), group_size())), x);
      ValueId all_z = b.emit_or_throw(OpKind::kAllGather, {z}, all_gather_attrs(d, groups(), group_size()));
      return e.fit(e.sel(e.bin(OpKind::kEq, x, e.fit(all_z, x)), e.fit(all_ct, x), e.zeros(x)), x);
    }
    case OpKind::kAllToAll:
      return e.fit(b.emit_or_throw(OpKind::kAllToAll, {ct},
                                   all_to_all_attrs(int_attr(in, "concat_dimension"), int_attr(in, "split_dimension"),
                                                    groups(), group_size())),
                   x);
    case OpKind::kCollectivePermute: {
      std::vector<int64_t> pairs = ints(in, "source_target_pairs"), inverse;
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        inverse.push_back(pairs[i + 1]);
        inverse.push_back(pairs[i]);
      }
      return b.emit_or_throw(OpKind::kCollectivePermute, {ct}, collective_permute_attrs(std::move(inverse)));
    }
    case OpKind::kShardingConstraint: return ct;
    default: return kNone;
  }
}

}  // namespace

std::vector<ValueId> emit_vjp_rule(ProgramBuilder& b, const Instr& in, std::span<const ValueId> ops, ValueId z,
                                   ValueId ct, const std::vector<bool>& need) {
  E e{b};
  const OpInfo& info = op_info(in.kind);
  const size_t n = ops.size();
  if (!info.differentiable) return std::vector<ValueId>(n, kNone);
  // while is refused as JAX refuses it; every other op with regions is differentiated per sibling group
  // (autodiff.cc) and never reaches here.
  if (in.kind == OpKind::kWhile) throw Unimplemented(control_flow_autodiff_error(in.kind, "reverse"));
  if (has_regions(in.kind)) throw Internal(control_flow_autodiff_error(in.kind, "reverse"));
  switch (info.op_class) {
    case OpClass::kUnary: return unary_rule(e, in.kind, ops[0], z, ct);
    case OpClass::kBinary: return binary_rule(e, in.kind, ops[0], ops[1], z, ct, need);
    default: break;
  }
  switch (in.kind) {
    case OpKind::kSelect: {
      std::vector<ValueId> out(3, kNone);
      ValueId zero = e.zeros(ct);
      if (need[1]) out[1] = e.sel(ops[0], ct, zero);
      if (need[2]) out[2] = e.sel(ops[0], zero, ct);
      return out;
    }
    case OpKind::kClamp: {  // clamp(lo, x, hi), JAX's rule
      const ValueId lo = ops[0], x = ops[1], hi = ops[2];
      std::vector<ValueId> out(3, kNone);
      ValueId zero = e.zeros(ct);
      if (need[0]) {
        ValueId p = e.bin(OpKind::kAnd, e.bin(OpKind::kGt, lo, x), e.bin(OpKind::kLt, lo, hi));
        out[0] = e.sel(p, ct, zero);
      }
      if (need[1]) {
        ValueId p = e.bin(OpKind::kAnd, e.bin(OpKind::kGt, x, lo), e.bin(OpKind::kLt, x, hi));
        out[1] = e.sel(p, ct, zero);
      }
      if (need[2]) out[2] = e.sel(e.bin(OpKind::kLt, hi, x), ct, zero);
      return out;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceProd: return reduce_rule(e, in, ops[0], z, ct);
    case OpKind::kDotGeneral: {
      const std::vector<int64_t> lb = ints(in, "lhs_batch"), rb = ints(in, "rhs_batch");
      const std::vector<int64_t> lc = ints(in, "lhs_contracting"), rc = ints(in, "rhs_contracting");
      std::vector<ValueId> out(2, kNone);
      if (need[0]) out[0] = dot_transpose_lhs(e, ct, ops[0], ops[1], lc, rc, lb, rb, false);
      if (need[1]) out[1] = dot_transpose_lhs(e, ct, ops[1], ops[0], rc, lc, rb, lb, true);
      return out;
    }
    case OpKind::kCumsum: {
      const int64_t dim = int_attr(in, "dimension"), rev = int_attr(in, "reverse");
      return {b.emit_or_throw(OpKind::kCumsum, {ct}, {{"dimension", dim}, {"reverse", int64_t{1 - rev}}})};
    }
    case OpKind::kTake:
      if (!need[0]) return {kNone, kNone};
      return {b.emit_or_throw(OpKind::kScatterAdd, {e.zeros(ops[0]), ops[1], ct}), kNone};
    case OpKind::kScatterAdd: {
      std::vector<ValueId> out(3, kNone);
      if (need[0]) out[0] = ct;
      if (need[2]) out[2] = b.emit_or_throw(OpKind::kTake, {ct, ops[1]});
      return out;
    }
    case OpKind::kConvGeneralDilated: return conv_vjp_rule(b, in, ops[0], ops[1], ct, need);
    case OpKind::kReduceWindow:
      if (!need[0]) return {kNone};
      return {reduce_window_vjp_rule(b, in, ops[0], z, ct)};
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
    case OpKind::kShardingConstraint:
      if (!need[0]) return {kNone};
      return {spmd_rule(e, in, ops[0], z, ct)};
    default: return shape_rule(e, in, ops, z, ct, need);
  }
}

}  // namespace mcx::ir::internal
