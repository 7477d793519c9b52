// The partitioner, rule by rule: every global program is partitioned for 1-, 2-, 3-, 4- and 8-device
// meshes (1-d, 2x2, 2x4, 4x2, 2x2x2, 3x1) under many specs per argument (several axes on one dimension,
// replicated, ...), run on every partition in lockstep by the naive SPMD reference, and each partition's
// results must equal its box of the unpartitioned reference result (bitwise for integer programs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/spmd/partitioner_harness.h"

namespace mcx::spmd {
namespace {

using ir::OpKind;
using ir::ProgramBuilder;
using ir::ValueId;
using ::testing::HasSubstr;
using testing::check_partition;
using testing::mesh_of;
using testing::sweep;

constexpr int kSamples = 8;
const testing::CheckOptions kExact{};
const testing::CheckOptions kFloat{1e-5, 1e-5};

AbstractValue ty(DType dt, std::vector<int64_t> dims) { return AbstractValue{dt, concrete_shape(dims)}; }
Buffer ints(std::vector<int64_t> dims, uint64_t seed, double lo = -5, double hi = 5) {
  return test::random_buffer(DType::kInt32, std::move(dims), seed, lo, hi);
}
Buffer floats(std::vector<int64_t> dims, uint64_t seed) {
  return test::random_buffer(DType::kFloat32, std::move(dims), seed, -1, 1);
}

TEST(PartitionerTest, Elementwise) {
  ProgramBuilder b("elementwise");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId y = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId z = b.binary(OpKind::kAdd, x, y);
  ValueId m = b.binary(OpKind::kMul, z, b.unary(OpKind::kNeg, x));
  ValueId c = b.binary(OpKind::kGt, m, y);
  ValueId s = b.select(c, m, y);
  ValueId cl = b.emit_or_throw(OpKind::kClamp, {x, s, z});
  ValueId cv = b.convert(cl, DType::kFloat32);
  ir::Program g = std::move(b).build({s, c, cv});
  sweep(g, {ints({24, 16}, 1), ints({24, 16}, 2)}, kSamples, kExact);
}

TEST(PartitionerTest, ElementwiseFloatUnary) {
  ProgramBuilder b("unary");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {8, 24}));
  ValueId e = b.unary(OpKind::kTanh, b.unary(OpKind::kExp, x));
  ValueId f = b.emit_or_throw(OpKind::kIsFinite, {e});
  ir::Program g = std::move(b).build({e, f});
  sweep(g, {floats({8, 24}, 3)}, kSamples, kExact);
}

TEST(PartitionerTest, BroadcastInDim) {
  ProgramBuilder b("broadcast");
  ValueId x = b.add_parameter(ty(DType::kInt32, {16}));
  ValueId y = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId col = b.add_parameter(ty(DType::kInt32, {24, 1}));
  ValueId s = b.add_parameter(ty(DType::kInt32, {}));
  ValueId bx = b.broadcast_in_dim(x, concrete_shape({24, 16}), {1});
  ValueId bc = b.broadcast_in_dim(col, concrete_shape({24, 16}), {0, 1});
  ValueId bs = b.broadcast_in_dim(s, concrete_shape({24, 16}), {});
  ValueId b3 = b.broadcast_in_dim(y, concrete_shape({24, 2, 16}), {0, 2});
  ValueId r = b.binary(OpKind::kAdd, b.binary(OpKind::kAdd, bx, y), b.binary(OpKind::kMul, bc, bs));
  ir::Program g = std::move(b).build({r, b3});
  sweep(g, {ints({16}, 4), ints({24, 16}, 5), ints({24, 1}, 6), ints({}, 7)}, kSamples, kExact);
}

// Broadcasts and iotas feeding a sharded consumer are emitted at the local shape (no global-size
// temporary followed by a dynamic_slice); a chain of broadcasts and an iota along an unsplit dimension
// included.
TEST(PartitionerTest, ReplicatedBroadcastsAreEmittedAtTheLocalShape) {
  ProgramBuilder b("local_broadcast");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId bias = b.add_parameter(ty(DType::kInt32, {16}));
  ValueId s = b.add_parameter(ty(DType::kInt32, {}));
  ValueId row = b.broadcast_in_dim(s, concrete_shape({24}), {});
  ValueId chain = b.broadcast_in_dim(row, concrete_shape({24, 16}), {0});
  ValueId bb = b.broadcast_in_dim(bias, concrete_shape({24, 16}), {1});
  ValueId io = b.emit_or_throw(OpKind::kIota, {},
                               {{"dtype", DType::kInt32}, {"shape", concrete_shape({24, 16})},
                                {"dimension", int64_t{1}}});
  // Each producer feeds a sharded consumer directly (propagation is forward only: a replicated op of two
  // replicated broadcasts would still be computed whole and then sliced).
  ValueId r = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, b.binary(OpKind::kAdd, x, bb), chain), io);
  ir::Program g = std::move(b).build({r});
  // Rows split (the iota counts along the unsplit dimension 1; a split counting dimension would need
  // offsets and is still sliced).
  const std::vector<std::pair<MeshAxes, PartitionSpec>> cases = {
      {mesh_of({"x"}, {4}), P("x")}, {mesh_of({"x"}, {3}), P("x")}, {mesh_of({"x", "y"}, {2, 4}), P(axes("x", "y"))}};
  for (const auto& [mesh, spec] : cases) {
    const int64_t local_rows = 24 / mesh.num_devices();
    PartitionedProgram pp = check_partition(g, mesh, {spec, P(), P()}, {spec},
                                            {ints({24, 16}, 31), ints({16}, 32), ints({}, 33)}, kExact);
    for (const ir::Instr& in : pp.per_device.instrs) {
      EXPECT_NE(in.kind, OpKind::kDynamicSlice) << mesh.to_string();
      if (in.kind == OpKind::kBroadcastInDim || in.kind == OpKind::kIota) {
        EXPECT_LE(value_or_throw(to_concrete(in.type.shape)).at(0), local_rows) << mesh.to_string();
      }
    }
  }
  sweep(g, {ints({24, 16}, 34), ints({16}, 35), ints({}, 36)}, kSamples, kExact);
}

TEST(PartitionerTest, Reshape) {
  ProgramBuilder b("reshape");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId keep0 = b.reshape(x, concrete_shape({24, 4, 4}));  // dim 0 survives whole
  ValueId keep1 = b.reshape(x, concrete_shape({6, 4, 16}));  // dim 1 survives whole, dim 0 split
  ValueId flat = b.reshape(x, concrete_shape({384}));
  ValueId other = b.reshape(x, concrete_shape({16, 24}));
  ValueId back = b.reshape(keep0, concrete_shape({24, 16}));
  ir::Program g = std::move(b).build({keep0, keep1, flat, other, back});
  sweep(g, {ints({24, 16}, 8)}, kSamples, kExact);
}

TEST(PartitionerTest, Transpose) {
  ProgramBuilder b("transpose");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 8, 4}));
  ValueId t = b.transpose(x, {2, 0, 1});
  ValueId u = b.binary(OpKind::kAdd, t, t);
  ir::Program g = std::move(b).build({u, b.transpose(x, {1, 0, 2})});
  sweep(g, {ints({24, 8, 4}, 9)}, kSamples, kExact);
}

TEST(PartitionerTest, Reductions) {
  ProgramBuilder b("reduce");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId p = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId s0 = b.reduce_sum(x, {0});
  ValueId s1 = b.reduce_sum(x, {1});
  ValueId s01 = b.reduce_sum(x, {0, 1});
  ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", std::vector<int64_t>{0}}});
  ValueId mn = b.emit_or_throw(OpKind::kReduceMin, {x}, {{"dimensions", std::vector<int64_t>{1}}});
  ValueId pr = b.emit_or_throw(OpKind::kReduceProd, {p}, {{"dimensions", std::vector<int64_t>{0, 1}}});
  ValueId pos = b.binary(OpKind::kGt, x, b.full_like(x, 0));
  ValueId any = b.emit_or_throw(OpKind::kReduceMax, {pos}, {{"dimensions", std::vector<int64_t>{0}}});
  ValueId all = b.emit_or_throw(OpKind::kReduceMin, {pos}, {{"dimensions", std::vector<int64_t>{1}}});
  // A partial sum consumed at once: the consumer must see the all-reduced value.
  ValueId use = b.binary(OpKind::kMul, s0, s0);
  ir::Program g = std::move(b).build({s0, s1, s01, mx, mn, pr, any, all, use});
  sweep(g, {ints({24, 16}, 10), ints({24, 16}, 11, 1, 2)}, kSamples, kExact);
}

TEST(PartitionerTest, FloatReductionWithinTolerance) {
  ProgramBuilder b("reduce_f32");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {24, 16}));
  ValueId s = b.reduce_sum(x, {0});
  ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", std::vector<int64_t>{0, 1}}});
  ir::Program g = std::move(b).build({s, mx});
  sweep(g, {floats({24, 16}, 12)}, kSamples, kFloat);
}

ValueId dot(ProgramBuilder& b, ValueId l, ValueId r, std::vector<int64_t> lb, std::vector<int64_t> rb,
            std::vector<int64_t> lc, std::vector<int64_t> rc) {
  return b.emit_or_throw(OpKind::kDotGeneral, {l, r},
                         {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contracting", lc}, {"rhs_contracting", rc}});
}

TEST(PartitionerTest, DotGeneralMatmul) {
  ProgramBuilder b("matmul");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId w = b.add_parameter(ty(DType::kInt32, {16, 8}));
  ValueId y = dot(b, x, w, {}, {}, {1}, {0});
  ir::Program g = std::move(b).build({y, b.binary(OpKind::kAdd, y, y)});
  sweep(g, {ints({24, 16}, 13), ints({16, 8}, 14)}, kSamples * 2, kExact);
}

TEST(PartitionerTest, DotGeneralBatchedAndMultiContracting) {
  ProgramBuilder b("batched");
  ValueId l = b.add_parameter(ty(DType::kInt32, {8, 6, 4}));
  ValueId r = b.add_parameter(ty(DType::kInt32, {4, 8, 16}));
  ValueId y = dot(b, l, r, {0}, {1}, {2}, {0});       // [8, 6, 16]
  ValueId z = dot(b, l, l, {}, {}, {0, 2}, {0, 2});   // [6, 6], same operand on both sides
  ir::Program g = std::move(b).build({y, z});
  sweep(g, {ints({8, 6, 4}, 15), ints({4, 8, 16}, 16)}, kSamples * 2, kExact);
}

TEST(PartitionerTest, DotGeneralFloat) {
  ProgramBuilder b("matmul_f32");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {8, 24}));
  ValueId w = b.add_parameter(ty(DType::kFloat32, {24, 16}));
  ir::Program g = std::move(b).build({dot(b, x, w, {}, {}, {1}, {0})});
  sweep(g, {floats({8, 24}, 17), floats({24, 16}, 18)}, kSamples, kFloat);
}

// sharding_constraint: the attribute is made for each mesh; the op disappears from the per-device
// program and the value is resharded to the constraint (Unconstrained dimensions keep their axes).
TEST(PartitionerTest, ShardingConstraint) {
  std::mt19937 rng(7);
  for (const MeshAxes& mesh : testing::test_meshes()) {
    std::vector<PartitionSpec> cands = testing::candidate_specs(mesh, {24, 16});
    for (int s = 0; s < 6; ++s) {
      PartitionSpec want = cands[rng() % cands.size()];
      if (s % 2 == 1) {
        std::vector<DimSpec> dims = want.dims();
        dims.resize(2);
        dims[rng() % 2] = DimSpec{{}, true};
        want = PartitionSpec(dims);
      }
      ProgramBuilder b("constraint");
      ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
      ValueId y = b.unary(OpKind::kNeg, x);
      ValueId c = b.emit_or_throw(OpKind::kShardingConstraint, {y},
                                  {{"sharding", encode_spec(want, mesh)}, {"mesh_shape", mesh.sizes}});
      ValueId z = b.binary(OpKind::kAdd, c, x);
      ir::Program g = std::move(b).build({c, z});
      PartitionSpec in = cands[rng() % cands.size()];
      PartitionedProgram pp = check_partition(g, mesh, {in}, {}, {ints({24, 16}, 19)}, kExact);
      for (const auto& instr : pp.per_device.instrs) EXPECT_NE(instr.kind, OpKind::kShardingConstraint);
      if (!want.has_unconstrained() && !pp.out_specs.empty()) {
        // The constrained result keeps the constraint's sharding when returned unconstrained.
        std::vector<int64_t> dims{24, 16};
        for (int64_t p = 0; p < mesh.num_devices(); ++p)
          EXPECT_EQ(index_box(pp.out_specs[0], mesh, dims, p), index_box(want, mesh, dims, p));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(PartitionerTest, OutSpecsReshardResults) {
  ProgramBuilder b("identity");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ir::Program g = std::move(b).build({x});
  MeshAxes mesh = mesh_of({"x", "y"}, {2, 4});
  std::vector<Buffer> args{ints({24, 16}, 20)};
  // Moving an axis between dimensions is one all_to_all.
  PartitionedProgram a = check_partition(g, mesh, {P("x", "y")}, {P(None, axes("y", "x"))}, args, kExact);
  EXPECT_EQ(a.stats.all_to_alls, 1);
  EXPECT_EQ(a.stats.all_gathers, 0);
  // Replicated to sharded: a local slice, no communication.
  PartitionedProgram s = check_partition(g, mesh, {P()}, {P(axes("y", "x"))}, args, kExact);
  EXPECT_EQ(s.stats.local_slices, 1);
  EXPECT_EQ(s.stats.all_gathers + s.stats.all_to_alls + s.stats.all_reduces, 0);
  // Sharded to replicated: one all_gather per sharded dimension.
  PartitionedProgram r = check_partition(g, mesh, {P("x", "y")}, {P()}, args, kExact);
  EXPECT_EQ(r.stats.all_gathers, 2);
  EXPECT_EQ(r.out_specs[0], P());
  // Unconstrained output dimensions keep the propagated axes.
  PartitionedProgram u = check_partition(g, mesh, {P("x", "y")}, {P(Unconstrained, None)}, args, kExact);
  EXPECT_EQ(u.out_specs[0], P("x"));
  // Propagated out_specs without request.
  PartitionedProgram n = check_partition(g, mesh, {P(None, axes("x", "y"))}, {std::nullopt}, args, kExact);
  EXPECT_EQ(n.out_specs[0], P(None, axes("x", "y")));
}

TEST(PartitionerTest, IotaAndConstantAreSlicedLocally) {
  ProgramBuilder b("iota");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId io = b.emit_or_throw(OpKind::kIota, {},
                               {{"dtype", DType::kInt32}, {"shape", concrete_shape({24, 16})},
                                {"dimension", int64_t{0}}});
  ValueId k = b.constant(ints({24, 16}, 21));
  ir::Program g = std::move(b).build({b.binary(OpKind::kAdd, b.binary(OpKind::kMul, x, io), k), io});
  sweep(g, {ints({24, 16}, 22)}, kSamples, kExact);
  PartitionedProgram pp =
      check_partition(g, mesh_of({"x"}, {4}), {P("x")}, {P("x"), P()}, {ints({24, 16}, 22)}, kExact);
  EXPECT_EQ(pp.stats.all_gathers, 0);
  EXPECT_EQ(pp.stats.fallback_gathers, 0);
}

TEST(PartitionerTest, SlicePadReverseCumsum) {
  ProgramBuilder b("shape_ops");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId pv = b.add_parameter(ty(DType::kInt32, {}));
  ValueId whole = b.emit_or_throw(OpKind::kSlice, {x}, {{"start", concrete_shape({0, 0})},
                                                        {"limit", concrete_shape({24, 16})},
                                                        {"strides", std::vector<int64_t>{1, 1}}});
  ValueId cut = b.emit_or_throw(OpKind::kSlice, {x}, {{"start", concrete_shape({0, 2})},
                                                      {"limit", concrete_shape({24, 14})},
                                                      {"strides", std::vector<int64_t>{1, 2}}});
  ValueId rows = b.emit_or_throw(OpKind::kSlice, {x}, {{"start", concrete_shape({4, 0})},
                                                       {"limit", concrete_shape({20, 16})},
                                                       {"strides", std::vector<int64_t>{1, 1}}});
  ValueId pad = b.emit_or_throw(OpKind::kPad, {x, pv}, {{"low", concrete_shape({0, -1})},
                                                        {"high", concrete_shape({0, 2})},
                                                        {"interior", std::vector<int64_t>{0, 1}}});
  ValueId rev = b.emit_or_throw(OpKind::kReverse, {x}, {{"dimensions", std::vector<int64_t>{1}}});
  ValueId cs0 = b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  ValueId cs1 = b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{1}}, {"reverse", int64_t{1}}});
  ir::Program g = std::move(b).build({whole, cut, rows, pad, rev, cs0, cs1});
  sweep(g, {ints({24, 16}, 23), ints({}, 24)}, kSamples, kExact);
}

TEST(PartitionerTest, Concatenate) {
  ProgramBuilder b("concat");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId y = b.add_parameter(ty(DType::kInt32, {24, 8}));
  ValueId z = b.add_parameter(ty(DType::kInt32, {8, 16}));
  ValueId c1 = b.emit_or_throw(OpKind::kConcatenate, {x, y}, {{"dimension", int64_t{1}}});
  ValueId c0 = b.emit_or_throw(OpKind::kConcatenate, {x, z, x}, {{"dimension", int64_t{0}}});
  ir::Program g = std::move(b).build({c1, c0});
  sweep(g, {ints({24, 16}, 25), ints({24, 8}, 26), ints({8, 16}, 27)}, kSamples, kExact);
}

TEST(PartitionerTest, DynamicSliceAndUpdate) {
  ProgramBuilder b("dynamic");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId u = b.add_parameter(ty(DType::kInt32, {24, 4}));
  ValueId i = b.add_parameter(ty(DType::kInt32, {}));
  ValueId j = b.add_parameter(ty(DType::kInt32, {}));
  ValueId ds = b.emit_or_throw(OpKind::kDynamicSlice, {x, i, j}, {{"sizes", concrete_shape({8, 16})}});
  ValueId ds2 = b.emit_or_throw(OpKind::kDynamicSlice, {x, i, j}, {{"sizes", concrete_shape({24, 5})}});
  ValueId dus = b.emit_or_throw(OpKind::kDynamicUpdateSlice, {x, u, i, j});
  ir::Program g = std::move(b).build({ds, ds2, dus});
  sweep(g, {ints({24, 16}, 28), ints({24, 4}, 29), test::scalar_buffer(DType::kInt32, 5),
            test::scalar_buffer(DType::kInt32, 30)},
        kSamples, kExact);
}

TEST(PartitionerTest, TakeAndScatterAdd) {
  ProgramBuilder b("indexing");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId idx = b.add_parameter(ty(DType::kInt32, {8}));
  ValueId idx2 = b.add_parameter(ty(DType::kInt32, {4, 2}));
  ValueId upd = b.add_parameter(ty(DType::kInt32, {8, 16}));
  ValueId t = b.emit_or_throw(OpKind::kTake, {x, idx});
  ValueId t2 = b.emit_or_throw(OpKind::kTake, {x, idx2});
  ValueId sa = b.emit_or_throw(OpKind::kScatterAdd, {x, idx, upd});
  ir::Program g = std::move(b).build({t, t2, sa});
  // Out-of-range indices are clamped; repeated indices accumulate.
  Buffer i1 = test::buffer_from_doubles(DType::kInt32, {8}, {3, 0, 23, 30, -2, 3, 11, 17});
  Buffer i2 = test::buffer_from_doubles(DType::kInt32, {4, 2}, {1, 2, 5, 8, 13, 21, 22, 0});
  sweep(g, {ints({24, 16}, 31), i1, i2, ints({8, 16}, 32)}, kSamples, kExact);
}

TEST(PartitionerTest, ArgMaxArgMin) {
  ProgramBuilder b("arg");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {24, 16}));
  ValueId a0 = b.emit_or_throw(OpKind::kArgMax, {x}, {{"dimension", int64_t{0}}, {"index_dtype", DType::kInt32}});
  ValueId a1 = b.emit_or_throw(OpKind::kArgMin, {x}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}});
  ir::Program g = std::move(b).build({a0, a1});
  sweep(g, {floats({24, 16}, 33)}, kSamples, kExact);
}

TEST(PartitionerTest, Threefry) {
  ProgramBuilder b("threefry");
  ValueId key = b.add_parameter(ty(DType::kUInt32, {2}));
  ValueId counts = b.add_parameter(ty(DType::kUInt32, {24, 2}));
  ir::Program g = std::move(b).build({b.emit_or_throw(OpKind::kThreefry2x32, {key, counts})});
  sweep(g, {test::random_buffer(DType::kUInt32, {2}, 34, 0, 4e9),
            test::random_buffer(DType::kUInt32, {24, 2}, 35, 0, 4e9)},
        kSamples, kExact);
}

TEST(PartitionerTest, StatsAndNotesForFallbacks) {
  ProgramBuilder b("fallback");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId cs = b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  ValueId rcs = b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{0}}, {"reverse", int64_t{1}}});
  ir::Program g = std::move(b).build({cs, rcs});
  PartitionedProgram pp =
      check_partition(g, mesh_of({"x"}, {4}), {P("x")}, {}, {ints({24, 16}, 36)}, kExact);
  EXPECT_EQ(pp.stats.fallback_gathers, 2);
  ASSERT_EQ(pp.stats.notes.size(), 2u);
  EXPECT_THAT(pp.stats.notes[0], HasSubstr("[partition] cumsum %1: operand 0 dim 0 {x} gathered"));
  EXPECT_EQ(pp.stats.all_gathers, 1);  // both consumers share one gathered x
  EXPECT_EQ(pp.out_specs[0], P());
}

TEST(PartitionerTest, OneDeviceMeshHasNoCollectives) {
  ProgramBuilder b("one");
  ValueId x = b.add_parameter(ty(DType::kInt32, {24, 16}));
  ValueId w = b.add_parameter(ty(DType::kInt32, {16, 8}));
  ValueId y = dot(b, x, w, {}, {}, {1}, {0});
  ir::Program g = std::move(b).build({b.reduce_sum(y, {0}), b.transpose(x, {1, 0})});
  PartitionedProgram pp = check_partition(g, mesh_of({"x", "y"}, {1, 1}), {P("x", "y"), P("y", "x")},
                                          {P("y"), P(axes("x", "y"))}, {ints({24, 16}, 37), ints({16, 8}, 38)},
                                          kExact);
  for (const auto& instr : pp.per_device.instrs) {
    EXPECT_FALSE(ir::is_collective(instr.kind)) << ir::op_name(instr.kind);
    EXPECT_NE(instr.kind, OpKind::kAxisIndex);
  }
  // Partition 0 of 1 runs without an SPMD context.
  EXPECT_TRUE(test::reference_evaluate(pp.per_device, std::vector<Buffer>{ints({24, 16}, 37), ints({16, 8}, 38)}).ok());
}

// ---- errors ----

ir::Program add_program(std::vector<int64_t> dims) {
  ProgramBuilder b("add");
  ValueId x = b.add_parameter(ty(DType::kFloat32, dims));
  return std::move(b).build({b.binary(OpKind::kAdd, x, x)});
}

TEST(PartitionerErrorTest, WrongNumberOfSpecs) {
  ir::Program g = add_program({8, 4});
  MeshAxes mesh = mesh_of({"x"}, {2});
  auto r = partition(g, mesh, std::vector<PartitionSpec>{}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("has 1 parameters, got 0 in_specs"));
  std::vector<PartitionSpec> in{P()};
  std::vector<std::optional<PartitionSpec>> out{P(), P()};
  r = partition(g, mesh, in, out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("got 2 out_specs"));
}

TEST(PartitionerErrorTest, SpecNotFitting) {
  ir::Program g = add_program({6, 4});
  MeshAxes mesh = mesh_of({"x", "y"}, {4, 2});
  for (const PartitionSpec& bad : {P("x"), P("z"), P("y", "y"), P(None, None, "x"), P(Unconstrained)}) {
    std::vector<PartitionSpec> in{bad};
    auto r = partition(g, mesh, in, {});
    ASSERT_FALSE(r.ok()) << bad.to_string();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("[partition: in_specs[0]]")) << r.status();
  }
  std::vector<PartitionSpec> in{P("y")};
  std::vector<std::optional<PartitionSpec>> out{P(None, "x", "y")};
  auto r = partition(g, mesh, in, out);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("[partition: out_specs[0]]"));
}

TEST(PartitionerErrorTest, SymbolicShapes) {
  ProgramBuilder b("sym");
  ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, symbolic_shape("b, 4")});
  ir::Program g = std::move(b).build({b.binary(OpKind::kAdd, x, x)});
  std::vector<PartitionSpec> in{P()};
  auto r = partition(g, mesh_of({"x"}, {2}), in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("static shapes"));
}

TEST(PartitionerErrorTest, ProgramWithCollectives) {
  ProgramBuilder b("coll");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {4}));
  ValueId y = b.emit_or_throw(OpKind::kAllReduce, {x},
                              {{"reduce", int64_t{0}}, {"replica_groups", std::vector<int64_t>{0}},
                               {"group_size", int64_t{1}}});
  ir::Program g = std::move(b).build({y});
  std::vector<PartitionSpec> in{P()};
  auto r = partition(g, mesh_of({"x"}, {1}), in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("must not contain collectives"));

  ProgramBuilder b2("axis");
  b2.add_parameter(ty(DType::kFloat32, {4}));
  ValueId ai = b2.emit_or_throw(OpKind::kAxisIndex, {}, {{"mesh_shape", std::vector<int64_t>{1}}, {"axis", int64_t{0}}});
  ir::Program g2 = std::move(b2).build({ai});
  r = partition(g2, mesh_of({"x"}, {1}), in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("axis_index"));
}

TEST(PartitionerErrorTest, ConstraintForAnotherMesh) {
  ProgramBuilder b("constraint");
  ValueId x = b.add_parameter(ty(DType::kFloat32, {8}));
  MeshAxes other = mesh_of({"x"}, {4});
  ValueId c = b.emit_or_throw(OpKind::kShardingConstraint, {x},
                              {{"sharding", encode_spec(P("x"), other)}, {"mesh_shape", other.sizes}});
  ir::Program g = std::move(b).build({c});
  std::vector<PartitionSpec> in{P()};
  auto r = partition(g, mesh_of({"x"}, {2}), in, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("sharding_constraint"));
}

}  // namespace
}  // namespace mcx::spmd
