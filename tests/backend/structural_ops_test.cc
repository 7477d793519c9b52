// Shape manipulation, reductions, dot_general, scans, indexing and random ops against the reference
// evaluator, over dtypes and shapes including empty and rank 0.
#include <cmath>

#include "mcx/backend/cpu/view.h"
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::Attrs;
using ir::OpKind;
using Ints = std::vector<int64_t>;

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

void check1(OpKind k, DType t, const Ints& dims, Attrs attrs, uint64_t seed, double lo = -4, double hi = 4) {
  SCOPED_TRACE(std::string(ir::op_name(k)) + " " + std::string(dtype_short_name(t)) + dims_str(dims));
  ir::Program p = test::single_op_program(k, {av(t, dims)}, std::move(attrs));
  if (is_unsigned_integer(t)) lo = 0;
  expect_matches_reference(p, {test::random_buffer(t, dims, seed, lo, hi)});
}

TEST(StructuralOps, Reductions) {
  struct Case { Ints dims; Ints red; };
  const std::vector<Case> cases = {{{3, 5, 7}, {0}},    {{3, 5, 7}, {1}},       {{3, 5, 7}, {2}},
                                   {{3, 5, 7}, {0, 2}}, {{3, 5, 7}, {0, 1, 2}}, {{3, 5, 7}, {}},
                                   {{0, 4}, {0}},       {{4, 0}, {1}},          {{}, {}},
                                   {{2, 20001}, {1}},   {{700, 3, 5}, {0}},     {{6, 1, 9}, {1}},
                                   {{2, 3, 4, 5}, {1, 3}}};
  uint64_t seed = 1;
  for (OpKind k : {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceMin, OpKind::kReduceProd}) {
    for (DType t : all_dtypes()) {
      if (t == DType::kBool) continue;  // reductions need a numeric dtype
      for (const Case& c : cases) {
        // Products of many values overflow/underflow: keep them near 1 for floats, small sizes for ints.
        double lo = -3, hi = 3;
        if (k == OpKind::kReduceProd) {
          if (product(c.dims) > 200) continue;
          if (is_floating(t)) lo = 0.7, hi = 1.3;
        }
        // Long f16/bf16 sums: compare with a looser tolerance (accumulation in float, one rounding).
        ir::Program p = test::single_op_program(k, {av(t, c.dims)}, {{"dimensions", c.red}});
        SCOPED_TRACE(std::string(ir::op_name(k)) + " " + std::string(dtype_short_name(t)) + dims_str(c.dims) +
                     " over " + dims_str(c.red));
        const double rtol = t == DType::kFloat32 ? 1e-5 : -1;
        expect_matches_reference(p, {test::random_buffer(t, c.dims, seed++, is_unsigned_integer(t) ? 0 : lo, hi)},
                                 rtol, t == DType::kFloat32 ? 1e-4 : -1);
      }
    }
  }
}

TEST(StructuralOps, ReduceMaxPropagatesNaN) {
  Buffer x = test::buffer_from_doubles(DType::kFloat32, {2, 3}, {1, NAN, 3, 4, 5, 6});
  ir::Program p = test::single_op_program(OpKind::kReduceMax, {x.abstract_value()}, {{"dimensions", Ints{1}}});
  std::vector<Buffer> got = run_cpu(p, {x});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(std::isnan(got[0].data<float>()[0]));
  EXPECT_EQ(got[0].data<float>()[1], 6.0f);
}

TEST(StructuralOps, ArgMaxArgMin) {
  uint64_t seed = 50;
  for (OpKind k : {OpKind::kArgMax, OpKind::kArgMin}) {
    for (DType t : all_dtypes()) {
      for (auto [dims, d] : std::vector<std::pair<Ints, int64_t>>{{{4, 9}, 1}, {{4, 9}, 0}, {{3, 4, 5}, 1}, {{0, 3}, 1}, {{1}, 0}}) {
        for (DType it : {DType::kInt32, DType::kInt64}) {
          check1(k, t, dims, {{"dimension", d}, {"index_dtype", it}}, seed++, 0, 4);  // ties are common
        }
      }
    }
    Buffer x = test::buffer_from_doubles(DType::kFloat32, {2, 4}, {1, NAN, 7, NAN, 9, 2, 9, 1});
    ir::Program p = test::single_op_program(k, {x.abstract_value()}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}});
    expect_matches_reference(p, {x});
  }
}

TEST(StructuralOps, Cumsum) {
  uint64_t seed = 80;
  for (DType t : all_dtypes()) {
    if (t == DType::kBool) continue;
    for (auto [dims, d] : std::vector<std::pair<Ints, int64_t>>{{{7}, 0}, {{3, 300}, 1}, {{300, 3}, 0}, {{2, 5, 3}, 1}, {{0, 2}, 0}}) {
      for (int64_t rev : {0, 1}) check1(OpKind::kCumsum, t, dims, {{"dimension", d}, {"reverse", rev}}, seed++, -2, 2);
    }
  }
}

TEST(StructuralOps, TransposeBroadcastReshapeSliceReverse) {
  uint64_t seed = 100;
  for (DType t : all_dtypes()) {
    check1(OpKind::kTranspose, t, {3, 4, 5}, {{"permutation", Ints{2, 0, 1}}}, seed++);
    check1(OpKind::kTranspose, t, {67, 129}, {{"permutation", Ints{1, 0}}}, seed++);
    check1(OpKind::kTranspose, t, {0, 3}, {{"permutation", Ints{1, 0}}}, seed++);
    check1(OpKind::kBroadcastInDim, t, {3, 1}, {{"shape", concrete_shape({2, 3, 4})}, {"broadcast_dimensions", Ints{1, 2}}}, seed++);
    check1(OpKind::kBroadcastInDim, t, {}, {{"shape", concrete_shape({2, 3})}, {"broadcast_dimensions", Ints{}}}, seed++);
    check1(OpKind::kReshape, t, {6, 4}, {{"shape", concrete_shape({2, 3, 4})}}, seed++);
    check1(OpKind::kSlice, t, {10, 9}, {{"start", concrete_shape({1, 2})}, {"limit", concrete_shape({9, 9})}, {"strides", Ints{3, 2}}}, seed++);
    check1(OpKind::kSlice, t, {10, 9}, {{"start", concrete_shape({4, 2})}, {"limit", concrete_shape({4, 9})}, {"strides", Ints{1, 1}}}, seed++);
    check1(OpKind::kReverse, t, {4, 5, 6}, {{"dimensions", Ints{0, 2}}}, seed++);
    check1(OpKind::kReverse, t, {0, 5}, {{"dimensions", Ints{0}}}, seed++);
  }
}

TEST(StructuralOps, ReshapeOfTransposeAndResultsThatAreViews) {
  ir::ProgramBuilder b("views");
  auto x = b.add_parameter(av(DType::kFloat32, {4, 6}));
  auto t = b.transpose(x, {1, 0});
  auto r = b.reshape(t, concrete_shape({3, 8}));
  auto rev = b.emit_or_throw(OpKind::kReverse, {x}, {{"dimensions", Ints{1}}});
  ir::Program p = std::move(b).build({r, t, rev, x});
  expect_matches_reference(p, {test::random_buffer(DType::kFloat32, {4, 6}, 7)});
}

TEST(StructuralOps, ConcatenatePad) {
  uint64_t seed = 150;
  for (DType t : all_dtypes()) {
    SCOPED_TRACE(std::string(dtype_short_name(t)));
    ir::Program c = test::single_op_program(OpKind::kConcatenate, {av(t, {2, 3}), av(t, {2, 0}), av(t, {2, 5})},
                                            {{"dimension", int64_t{1}}});
    expect_matches_reference(c, {test::random_buffer(t, {2, 3}, seed), test::random_buffer(t, {2, 0}, seed + 1),
                                 test::random_buffer(t, {2, 5}, seed + 2)});
    struct PadCase { Ints dims, low, high, interior; };
    for (const PadCase& pc : std::vector<PadCase>{{{3, 4}, {1, 2}, {2, 0}, {0, 0}},
                                                  {{3, 4}, {-1, 1}, {1, -2}, {1, 2}},
                                                  {{5}, {-3}, {-3}, {1}},
                                                  {{0, 2}, {1, 1}, {1, 1}, {2, 0}},
                                                  {{}, {}, {}, {}}}) {
      ir::Program p = test::single_op_program(OpKind::kPad, {av(t, pc.dims), av(t, {})},
                                              {{"low", concrete_shape(pc.low)}, {"high", concrete_shape(pc.high)},
                                               {"interior", pc.interior}});
      expect_matches_reference(p, {test::random_buffer(t, pc.dims, seed + 3), test::scalar_buffer(t, 1)});
    }
    seed += 4;
  }
}

TEST(StructuralOps, DynamicSliceAndUpdateClamp) {
  for (DType t : {DType::kFloat32, DType::kInt8, DType::kFloat16, DType::kBool}) {
    for (auto [i, j] : std::vector<std::pair<int, int>>{{0, 0}, {2, 1}, {-3, 9}, {100, -100}}) {
      SCOPED_TRACE(std::string(dtype_short_name(t)) + " at " + std::to_string(i) + "," + std::to_string(j));
      ir::Program ds = test::single_op_program(OpKind::kDynamicSlice, {av(t, {5, 6}), av(DType::kInt32, {}), av(DType::kInt64, {})},
                                               {{"sizes", concrete_shape({2, 3})}});
      Buffer x = test::random_buffer(t, {5, 6}, 9);
      expect_matches_reference(ds, {x, test::scalar_buffer(DType::kInt32, i), test::scalar_buffer(DType::kInt64, j)});
      ir::Program dus = test::single_op_program(OpKind::kDynamicUpdateSlice,
                                                {av(t, {5, 6}), av(t, {2, 3}), av(DType::kInt32, {}), av(DType::kInt32, {})});
      expect_matches_reference(dus, {x, test::random_buffer(t, {2, 3}, 10), test::scalar_buffer(DType::kInt32, i),
                                      test::scalar_buffer(DType::kInt32, j)});
    }
  }
}

TEST(StructuralOps, TakeAndScatterAdd) {
  uint64_t seed = 200;
  for (DType t : all_dtypes()) {
    SCOPED_TRACE(std::string(dtype_short_name(t)));
    // Indices include out-of-range values (clamped) and duplicates (accumulate).
    Buffer idx = test::buffer_from_doubles(DType::kInt32, {2, 3}, {0, 4, -2, 9, 2, 2});
    ir::Program tk = test::single_op_program(OpKind::kTake, {av(t, {5, 3}), idx.abstract_value()});
    Buffer x = test::random_buffer(t, {5, 3}, seed++, 0, 5);
    expect_matches_reference(tk, {x, idx});
    if (t == DType::kBool) continue;
    ir::Program sa = test::single_op_program(OpKind::kScatterAdd, {av(t, {5, 3}), idx.abstract_value(), av(t, {2, 3, 3})});
    expect_matches_reference(sa, {x, idx, test::random_buffer(t, {2, 3, 3}, seed++, 0, 5)});
  }
}

TEST(StructuralOps, Iota) {
  for (DType t : all_dtypes()) {
    if (t == DType::kBool) continue;
    for (int64_t d : {0, 1}) {
      ir::ProgramBuilder b("iota");
      auto v = b.emit_or_throw(OpKind::kIota, {}, {{"dtype", t}, {"shape", concrete_shape({3, 70})}, {"dimension", d}});
      expect_matches_reference(std::move(b).build({v}), {});
    }
  }
}

TEST(StructuralOps, ThreefryKnownAnswers) {
  // Random123 known-answer vectors for threefry2x32_20.
  struct Kat { uint32_t k0, k1, x0, x1, y0, y1; };
  const Kat kats[] = {{0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
                      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
                      {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u}};
  for (const Kat& k : kats) {
    Buffer key = Buffer::from_vector<uint32_t>({k.k0, k.k1}, {2});
    Buffer cnt = Buffer::from_vector<uint32_t>({k.x0, k.x1}, {1, 2});
    ir::Program p = test::single_op_program(OpKind::kThreefry2x32, {key.abstract_value(), cnt.abstract_value()});
    std::vector<Buffer> got = run_cpu(p, {key, cnt});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].data<uint32_t>()[0], k.y0);
    EXPECT_EQ(got[0].data<uint32_t>()[1], k.y1);
  }
  Buffer key = Buffer::from_vector<uint32_t>({42, 7}, {2});
  Buffer cnt = test::random_buffer(DType::kUInt32, {3, 50, 2}, 3, 0, 4e9);
  ir::Program p = test::single_op_program(OpKind::kThreefry2x32, {key.abstract_value(), cnt.abstract_value()});
  expect_matches_reference(p, {key, cnt});
}

TEST(StructuralOps, DotGeneral) {
  struct Case { Ints l, r, lb, rb, lc, rc; };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}, {}, {}, {1}, {0}},              // plain
      {{4, 3}, {4, 5}, {}, {}, {0}, {0}},              // lhs transposed
      {{3, 4}, {5, 4}, {}, {}, {1}, {1}},              // rhs transposed
      {{2, 3, 4}, {2, 4, 5}, {0}, {0}, {2}, {1}},      // batch
      {{3, 2, 4}, {4, 5, 2}, {1}, {2}, {2}, {0}},      // batch dims in odd places
      {{2, 3, 4, 6}, {6, 4, 7}, {}, {}, {2, 3}, {1, 0}},  // two contracting dims, permuted
      {{3, 0}, {0, 5}, {}, {}, {1}, {0}},              // K = 0: zeros
      {{0, 4}, {4, 5}, {}, {}, {1}, {0}},              // M = 0
      {{4}, {4}, {}, {}, {0}, {0}},                    // vector dot (rank-0 result)
      {{33, 65}, {65, 17}, {}, {}, {1}, {0}}};
  uint64_t seed = 300;
  for (DType t : all_dtypes()) {
    if (t == DType::kBool) continue;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_short_name(t)) + dims_str(c.l) + "x" + dims_str(c.r));
      ir::Program p = test::single_op_program(
          OpKind::kDotGeneral, {av(t, c.l), av(t, c.r)},
          {{"lhs_batch", c.lb}, {"rhs_batch", c.rb}, {"lhs_contracting", c.lc}, {"rhs_contracting", c.rc}});
      const double lo = is_unsigned_integer(t) ? 0 : -3;
      // 16-bit floats: products summed in float and rounded once (the reference rounds once too).
      expect_matches_reference(p, {test::random_buffer(t, c.l, seed, lo, 3), test::random_buffer(t, c.r, seed + 1, lo, 3)},
                               t == DType::kFloat32 ? 1e-5 : -1, t == DType::kFloat32 ? 1e-4 : -1);
      seed += 2;
    }
  }
}

TEST(StructuralOps, DotGeneralOfTransposedViews) {
  // Transposes feeding dot_general are views; the GEMM uses them as transposed matrices without copies.
  ir::ProgramBuilder b("dot_t");
  auto x = b.add_parameter(av(DType::kFloat32, {64, 48}));
  auto w = b.add_parameter(av(DType::kFloat32, {32, 64}));
  auto xt = b.transpose(x, {1, 0});
  auto wt = b.transpose(w, {1, 0});
  auto d = b.emit_or_throw(OpKind::kDotGeneral, {xt, wt},
                           {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}}, {"lhs_contracting", Ints{1}},
                            {"rhs_contracting", Ints{0}}});
  expect_matches_reference(std::move(b).build({d}),
                           {test::random_buffer(DType::kFloat32, {64, 48}, 1), test::random_buffer(DType::kFloat32, {32, 64}, 2)},
                           1e-5, 1e-4);
}

}  // namespace
}  // namespace mcx::cpu::testing
