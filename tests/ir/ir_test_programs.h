// Programs shared by the IR tests (header-only so that the tests stay one executable).
#pragma once

#include <memory>
#include <set>

#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/debug_print.h"

namespace mcx::ir::testing_programs {

inline AbstractValue type_of(std::string_view text) { return value_or_throw(parse_abstract_value(text)); }

// One program that uses every OpKind at least once (with symbolic shapes and a scope constraint).
inline Program all_ops_program() {
  using Ints = std::vector<int64_t>;
  ProgramBuilder b("all_ops", value_or_throw(SymbolicScope::create({"b >= 2", "max(b, c) <= 4096"})));
  ValueId x = b.add_parameter(type_of("f32[b,4]"));
  ValueId y = b.add_parameter(type_of("f32[b,4]"));
  ValueId xi = b.add_parameter(type_of("i32[b,4]"));
  ValueId xb = b.add_parameter(type_of("bool[b,4]"));
  ValueId key = b.add_parameter(type_of("u32[2]"));
  ValueId counts = b.add_parameter(type_of("u32[c,2]"));
  ValueId w = b.add_parameter(type_of("f32[4,3]"));
  ValueId idx = b.add_parameter(type_of("i32[3]"));
  std::vector<ValueId> out;
  out.push_back(b.constant(Buffer::from_vector<float>({1.5f, -0.0f, 3.25f}, {3})));
  out.push_back(b.emit_or_throw(OpKind::kIota, {},
                                {{"dtype", DType::kInt32}, {"shape", symbolic_shape("b, 4")}, {"dimension", int64_t{1}}}));
  for (OpKind k : {OpKind::kNeg, OpKind::kAbs, OpKind::kSign, OpKind::kExp, OpKind::kLog, OpKind::kLog1p,
                   OpKind::kExpm1, OpKind::kTanh, OpKind::kLogistic, OpKind::kSqrt, OpKind::kRsqrt, OpKind::kFloor,
                   OpKind::kCeil, OpKind::kRound, OpKind::kSin, OpKind::kCos, OpKind::kStopGradient,
                   OpKind::kIsFinite})
    out.push_back(b.unary(k, x));
  out.push_back(b.unary(OpKind::kNot, xb));
  out.push_back(b.convert(x, DType::kFloat16));
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kRem, OpKind::kPow, OpKind::kMax,
                   OpKind::kMin, OpKind::kEq, OpKind::kNe, OpKind::kLt, OpKind::kLe, OpKind::kGt, OpKind::kGe})
    out.push_back(b.binary(k, x, y));
  for (OpKind k : {OpKind::kAnd, OpKind::kOr, OpKind::kXor}) out.push_back(b.binary(k, xi, xi));
  out.push_back(b.select(xb, x, y));
  out.push_back(b.emit_or_throw(OpKind::kClamp, {x, x, y}));
  out.push_back(b.broadcast_in_dim(x, symbolic_shape("2, b, 4"), {1, 2}));
  out.push_back(b.reshape(x, symbolic_shape("4*b")));
  out.push_back(b.transpose(x, {1, 0}));
  out.push_back(b.emit_or_throw(OpKind::kSlice, {x},
                                {{"start", symbolic_shape("0, 1")}, {"limit", symbolic_shape("b, 4")},
                                 {"strides", Ints{1, 2}}}));
  ValueId i0 = b.scalar_constant(DType::kInt32, 1);
  ValueId ds = b.emit_or_throw(OpKind::kDynamicSlice, {x, i0, i0}, {{"sizes", symbolic_shape("1, 2")}});
  out.push_back(ds);
  out.push_back(b.emit_or_throw(OpKind::kDynamicUpdateSlice, {x, ds, i0, i0}));
  out.push_back(b.emit_or_throw(OpKind::kConcatenate, {x, y, x}, {{"dimension", int64_t{0}}}));
  ValueId zero = b.scalar_constant(DType::kFloat32, 0);
  out.push_back(b.emit_or_throw(OpKind::kPad, {x, zero},
                                {{"low", symbolic_shape("1, -1")}, {"high", symbolic_shape("0, 2")},
                                 {"interior", Ints{1, 0}}}));
  out.push_back(b.emit_or_throw(OpKind::kReverse, {x}, {{"dimensions", Ints{0}}}));
  for (OpKind k : {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceMin, OpKind::kReduceProd})
    out.push_back(b.emit_or_throw(k, {x}, {{"dimensions", Ints{1}}}));
  for (OpKind k : {OpKind::kArgMax, OpKind::kArgMin})
    out.push_back(b.emit_or_throw(k, {x}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}}));
  out.push_back(b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                                {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contracting", Ints{1}},
                                 {"rhs_contracting", Ints{0}}}));
  out.push_back(b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{1}}, {"reverse", int64_t{1}}}));
  ValueId taken = b.emit_or_throw(OpKind::kTake, {w, idx});
  out.push_back(taken);
  out.push_back(b.emit_or_throw(OpKind::kScatterAdd, {w, idx, taken}));
  out.push_back(b.emit_or_throw(OpKind::kThreefry2x32, {key, counts}));
  return std::move(b).build(out);
}

// One program that uses every SPMD op (opset 2) at least once: groups of 2 over 4 partitions (a 2x2 mesh).
inline Program spmd_ops_program() {
  using Ints = std::vector<int64_t>;
  ProgramBuilder b("spmd_ops", value_or_throw(SymbolicScope::create({"b >= 1"})));
  ValueId x = b.add_parameter(type_of("f32[b,4]"));
  ValueId xb = b.add_parameter(type_of("bool[b,4]"));
  ValueId xi = b.add_parameter(type_of("i32[2*b,3]"));
  const Ints rows{0, 1, 2, 3}, cols{0, 2, 1, 3};
  std::vector<ValueId> out;
  out.push_back(b.emit_or_throw(OpKind::kAllReduce, {x},
                                {{"reduce", int64_t{0}}, {"replica_groups", rows}, {"group_size", int64_t{2}}}));
  out.push_back(b.emit_or_throw(OpKind::kAllReduce, {xb},
                                {{"reduce", int64_t{1}}, {"replica_groups", cols}, {"group_size", int64_t{2}}}));
  out.push_back(b.emit_or_throw(OpKind::kAllGather, {x},
                                {{"dimension", int64_t{1}}, {"replica_groups", cols}, {"group_size", int64_t{2}}}));
  out.push_back(b.emit_or_throw(
      OpKind::kReduceScatter, {xi},
      {{"dimension", int64_t{0}}, {"reduce", int64_t{0}}, {"replica_groups", rows}, {"group_size", int64_t{2}}}));
  out.push_back(b.emit_or_throw(OpKind::kAllToAll, {x},
                                {{"split_dimension", int64_t{1}}, {"concat_dimension", int64_t{0}},
                                 {"replica_groups", Ints{3, 2, 1, 0}}, {"group_size", int64_t{4}}}));
  out.push_back(b.emit_or_throw(OpKind::kCollectivePermute, {x}, {{"source_target_pairs", Ints{0, 1, 1, 2, 2, 0}}}));
  out.push_back(b.emit_or_throw(OpKind::kAxisIndex, {}, {{"mesh_shape", Ints{2, 2}}, {"axis", int64_t{1}}}));
  out.push_back(b.emit_or_throw(OpKind::kShardingConstraint, {x},
                                {{"sharding", Ints{1, 0, -1}}, {"mesh_shape", Ints{2, 2}}}));
  return std::move(b).build(out);
}

// One program that uses every windowed op (opset 3) with a symbolic batch: a grouped, strided, dilated
// NHWC convolution, an NCHW one, and max / sum / min windows.
inline Program window_ops_program() {
  using Ints = std::vector<int64_t>;
  ProgramBuilder b("window_ops", value_or_throw(SymbolicScope::create({"b >= 1"})));
  ValueId x = b.add_parameter(type_of("f32[b,9,8,4]"));
  ValueId w = b.add_parameter(type_of("f32[3,2,2,6]"));
  ValueId xc = b.add_parameter(type_of("f64[b,3,7]"));
  ValueId wc = b.add_parameter(type_of("f64[5,3,2]"));
  std::vector<ValueId> out;
  out.push_back(b.emit_or_throw(OpKind::kConvGeneralDilated, {x, w},
                                {{"lhs_spec", Ints{0, 3, 1, 2}}, {"rhs_spec", Ints{3, 2, 0, 1}},
                                 {"out_spec", Ints{0, 3, 1, 2}}, {"window_strides", Ints{2, 1}},
                                 {"lhs_dilation", Ints{1, 2}}, {"rhs_dilation", Ints{2, 1}},
                                 {"padding_low", symbolic_shape("1, 0")}, {"padding_high", symbolic_shape("2, -1")},
                                 {"feature_group_count", int64_t{2}}}));
  out.push_back(b.emit_or_throw(OpKind::kConvGeneralDilated, {xc, wc},
                                {{"lhs_spec", Ints{0, 1, 2}}, {"rhs_spec", Ints{0, 1, 2}}, {"out_spec", Ints{0, 1, 2}},
                                 {"window_strides", Ints{1}}, {"lhs_dilation", Ints{1}}, {"rhs_dilation", Ints{1}},
                                 {"padding_low", symbolic_shape("0")}, {"padding_high", symbolic_shape("0")},
                                 {"feature_group_count", int64_t{1}}}));
  for (int64_t reduce : {0, 1, 2})
    out.push_back(b.emit_or_throw(OpKind::kReduceWindow, {x},
                                  {{"reduce", reduce}, {"window_dimensions", Ints{1, 3, 2, 1}},
                                   {"window_strides", Ints{1, 2, 2, 1}}, {"padding_low", symbolic_shape("0, 1, 0, 0")},
                                   {"padding_high", symbolic_shape("0, 1, 1, 0")}}));
  return std::move(b).build(out);
}

// The ops of opset 4 (erf, argsort) on f32, f64 and i32 with a symbolic batch.
inline Program special_ops_program() {
  ProgramBuilder b("special_ops", value_or_throw(SymbolicScope::create({"b >= 1"})));
  ValueId x = b.add_parameter(type_of("f32[b,3]"));
  ValueId y = b.add_parameter(type_of("f64[2,b]"));
  ValueId z = b.add_parameter(type_of("i32[b,4]"));
  return std::move(b).build(
      {b.emit_or_throw(OpKind::kErf, {x}, {}), b.emit_or_throw(OpKind::kErf, {y}, {}),
       b.emit_or_throw(OpKind::kArgsort, {x}, {{"dimension", int64_t{1}}, {"descending", int64_t{0}}}),
       b.emit_or_throw(OpKind::kArgsort, {z}, {{"dimension", int64_t{0}}, {"descending", int64_t{1}}})});
}

// The ops of opset 5 (erfc, erf_inv) on f32 and f64 with a symbolic batch.
inline Program special_functions_program() {
  ProgramBuilder b("special_functions", value_or_throw(SymbolicScope::create({"b >= 1"})));
  ValueId x = b.add_parameter(type_of("f32[b,3]"));
  ValueId y = b.add_parameter(type_of("f64[2,b]"));
  return std::move(b).build({b.emit_or_throw(OpKind::kErfc, {x}, {}), b.emit_or_throw(OpKind::kErfInv, {y}, {}),
                             b.emit_or_throw(OpKind::kErfInv, {x}, {})});
}

// remat_barrier in each role (opset 6): a region over tanh of x, its output, and a recomputed input.
inline Program remat_program() {
  ProgramBuilder b("remat", value_or_throw(SymbolicScope::create({"b >= 1"})));
  ValueId x = b.add_parameter(type_of("f32[b,3]"));
  ValueId in = b.emit_or_throw(OpKind::kRematBarrier, {x}, {{"region", int64_t{0}}, {"role", int64_t{0}}});
  ValueId out = b.emit_or_throw(OpKind::kRematBarrier, {b.unary(OpKind::kTanh, in)},
                                {{"region", int64_t{0}}, {"role", int64_t{1}}});
  ValueId again = b.emit_or_throw(OpKind::kRematBarrier, {x}, {{"region", int64_t{0}}, {"role", int64_t{2}}});
  return std::move(b).build({out, again});
}

// Opset 7: a scan with two results (a carry and a stacked output) over a symbolic batch, a while loop and
// a cond, each region a small program of its own.
inline Program control_flow_program() {
  const SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 1"}));
  const AbstractValue row = type_of("f32[b,3]");
  const AbstractValue i32 = type_of("i32[]");
  ProgramBuilder sb("scan_body", scope);  // (c, x, k) -> (c + x * k, c)
  ValueId c = sb.add_parameter(row), x = sb.add_parameter(row), k = sb.add_parameter(type_of("f32[]"));
  ValueId next = sb.binary(OpKind::kAdd, c, sb.binary(OpKind::kMul, x, sb.broadcast_in_dim(k, row.shape, {})));
  auto scan_body = std::make_shared<const Program>(std::move(sb).build({next, c}));
  ProgramBuilder wc("while_cond");  // i < 3
  ValueId i = wc.add_parameter(i32);
  auto while_cond = std::make_shared<const Program>(
      std::move(wc).build({wc.binary(OpKind::kLt, i, wc.scalar_constant(DType::kInt32, 3))}));
  ProgramBuilder wb("while_body");  // i + 1
  ValueId j = wb.add_parameter(i32);
  auto while_body = std::make_shared<const Program>(
      std::move(wb).build({wb.binary(OpKind::kAdd, j, wb.scalar_constant(DType::kInt32, 1))}));
  ProgramBuilder b0("double", scope), b1("negate", scope);
  ValueId v0 = b0.add_parameter(row), v1 = b1.add_parameter(row);
  auto branch0 = std::make_shared<const Program>(std::move(b0).build({b0.binary(OpKind::kAdd, v0, v0)}));
  auto branch1 = std::make_shared<const Program>(std::move(b1).build({b1.unary(OpKind::kNeg, v1)}));

  ProgramBuilder b("control_flow", scope);
  ValueId h0 = b.add_parameter(row), xs = b.add_parameter(type_of("f32[4,b,3]"));
  ValueId scale = b.add_parameter(type_of("f32[]")), start = b.add_parameter(i32), index = b.add_parameter(i32);
  auto scan_attrs_of = [&](int64_t result) {
    return Attrs{{"regions", Regions{scan_body}}, {"num_carry", int64_t{1}}, {"num_xs", int64_t{1}},
                 {"length", int64_t{4}}, {"reverse", int64_t{1}}, {"result", result}};
  };
  ValueId last = b.emit_or_throw(OpKind::kScan, {h0, xs, scale}, scan_attrs_of(0));
  ValueId stacked = b.emit_or_throw(OpKind::kScan, {h0, xs, scale}, scan_attrs_of(1));
  ValueId count = b.emit_or_throw(OpKind::kWhile, {start},
                                  {{"regions", Regions{while_cond, while_body}}, {"num_carry", int64_t{1}},
                                   {"num_cond_consts", int64_t{0}}, {"result", int64_t{0}}});
  ValueId chosen = b.emit_or_throw(OpKind::kCond, {index, last},
                                   {{"regions", Regions{branch0, branch1}}, {"branch_consts", std::vector<int64_t>{0, 0}},
                                    {"result", int64_t{0}}});
  return std::move(b).build({chosen, stacked, count});
}

// A custom_vjp_call and a custom_jvp_call (opset 8) of negation, with a constant in bwd and a symbolic dim.
inline Program custom_rules_program() {
  const SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 1"}));
  const AbstractValue row = type_of("f32[b,3]");
  auto unary = [&](const char* name, auto&& body) {
    ProgramBuilder pb(name, scope);
    ValueId x = pb.add_parameter(row);
    std::vector<ValueId> out = body(pb, x);
    return std::make_shared<const Program>(std::move(pb).build(std::move(out)));
  };
  auto fun = unary("neg", [](ProgramBuilder& pb, ValueId x) { return std::vector<ValueId>{pb.unary(OpKind::kNeg, x)}; });
  auto fwd = unary("neg_fwd", [](ProgramBuilder& pb, ValueId x) { return std::vector<ValueId>{pb.unary(OpKind::kNeg, x), x}; });
  ProgramBuilder bb("neg_bwd", scope);  // (residual x, ct, k) -> -ct * k
  bb.add_parameter(row);
  ValueId ct = bb.add_parameter(row), k = bb.add_parameter(type_of("f32[]"));
  auto bwd = std::make_shared<const Program>(std::move(bb).build(
      {bb.binary(OpKind::kMul, bb.unary(OpKind::kNeg, ct), bb.broadcast_in_dim(k, row.shape, {}))}));
  ProgramBuilder jb("neg_jvp", scope);  // (x, t) -> (-x, -t)
  ValueId jx = jb.add_parameter(row), jt = jb.add_parameter(row);
  auto jvp = std::make_shared<const Program>(std::move(jb).build({jb.unary(OpKind::kNeg, jx), jb.unary(OpKind::kNeg, jt)}));

  ProgramBuilder b("custom_rules", scope);
  ValueId x = b.add_parameter(row), scale = b.add_parameter(type_of("f32[]"));
  ValueId v = b.emit_or_throw(OpKind::kCustomVjpCall, {x, scale},
                              {{"regions", Regions{fun, fwd, bwd}}, {"num_args", int64_t{1}},
                               {"region_consts", std::vector<int64_t>{0, 0, 1}}, {"result", int64_t{0}}});
  ValueId j = b.emit_or_throw(OpKind::kCustomJvpCall, {v},
                              {{"regions", Regions{fun, jvp}}, {"num_args", int64_t{1}},
                               {"region_consts", std::vector<int64_t>{0, 0}}, {"result", int64_t{0}}});
  return std::move(b).build({j});
}

// The ops of opset 9: a shard_map over a 2x2 mesh (rows split over axis 0, a symbolic unsplit dim; the body
// sums over axis 0, a replicated result, and negates, a result split like the operand) and debug_prints, one
// in the body on every device, one at top level on partition 0.
inline Program shard_map_program() {
  const SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 1"}));
  ProgramBuilder pb("body", scope);
  ValueId local = pb.add_parameter(type_of("f32[2,b]"));
  ValueId summed = pb.emit_or_throw(OpKind::kAllReduce, {local},
                                    {{"reduce", int64_t{0}}, {"replica_groups", std::vector<int64_t>{0, 2, 1, 3}},
                                     {"group_size", int64_t{2}}});
  pb.emit_or_throw(OpKind::kDebugPrint, {local, summed}, debug_print_attrs("local {} summed {{{}}}", -1));
  auto body = std::make_shared<const Program>(std::move(pb).build({summed, pb.unary(OpKind::kNeg, local)}));
  ProgramBuilder b("shard_map", scope);
  ValueId x = b.add_parameter(type_of("f32[4,b]"));
  Attrs attrs{{"regions", Regions{body}},
              {"mesh_shape", std::vector<int64_t>{2, 2}},
              {"in_specs", std::vector<int64_t>{1, 0, 0}},
              {"out_specs", std::vector<int64_t>{0, 0, 1, 0, 0}},
              {"result", int64_t{0}}};
  ValueId sum = b.emit_or_throw(OpKind::kShardMap, {x}, attrs);
  attrs.set("result", int64_t{1});
  ValueId neg = b.emit_or_throw(OpKind::kShardMap, {x}, attrs);
  b.emit_or_throw(OpKind::kDebugPrint, {}, debug_print_attrs("done", 0));
  return std::move(b).build({sum, neg});
}

inline std::set<OpKind> kinds_used(const Program& p) {
  std::set<OpKind> s;
  for (const Instr& i : p.instrs) s.insert(i.kind);
  return s;
}

}  // namespace mcx::ir::testing_programs
