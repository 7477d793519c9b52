// Tests of the test oracle itself (tests/support/reference_eval): known answers computed by hand or
// published (Random123 threefry vectors), so the evaluator the kernels are checked against is checked too.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::Attrs;
using ir::OpKind;
using ir::Program;

AbstractValue av(DType t, std::vector<int64_t> dims) { return {t, concrete_shape(dims)}; }

std::vector<double> run1(const Program& p, const std::vector<Buffer>& args) {
  auto r = reference_evaluate(p, args);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return (*r)[0].to_doubles();
}

TEST(ReferenceEval, ThreefryMatchesRandom123KnownAnswers) {
  // Random123 kat_vectors for threefry2x32_20 (also JAX's prng test): (key, counter) -> output.
  struct Kat { uint32_t k0, k1, c0, c1, y0, y1; };
  const Kat kats[] = {
      {0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
      {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u},
  };
  for (const Kat& k : kats) {
    auto [y0, y1] = threefry2x32_block(k.k0, k.k1, k.c0, k.c1);
    EXPECT_EQ(y0, k.y0);
    EXPECT_EQ(y1, k.y1);
  }
  // Through the op: each row of counts is one block under the key.
  Program p = single_op_program(OpKind::kThreefry2x32, {av(DType::kUInt32, {2}), av(DType::kUInt32, {3, 2})});
  Buffer key = Buffer::from_vector<uint32_t>({0x13198a2eu, 0x03707344u}, {2});
  Buffer counts = Buffer::from_vector<uint32_t>({0, 0, 0x243f6a88u, 0x85a308d3u, 0xffffffffu, 0xffffffffu}, {3, 2});
  auto r = reference_evaluate(p, std::vector<Buffer>{key, counts});
  ASSERT_TRUE(r.ok()) << r.status();
  const uint32_t* out = (*r)[0].data<uint32_t>();
  EXPECT_EQ(out[2], 0xc4923a9cu);
  EXPECT_EQ(out[3], 0x483df7a0u);
  auto row0 = threefry2x32_block(0x13198a2eu, 0x03707344u, 0, 0);
  EXPECT_EQ(out[0], row0.first);
  EXPECT_EQ(out[1], row0.second);
}

TEST(ReferenceEval, IntegerDivRemTruncateAndFollowXlaOnZero) {
  Buffer x = Buffer::from_vector<int32_t>({7, -7, 7, -7, 5, std::numeric_limits<int32_t>::min()}, {6});
  Buffer y = Buffer::from_vector<int32_t>({2, 2, -2, -2, 0, -1}, {6});
  Program div = single_op_program(OpKind::kDiv, {av(DType::kInt32, {6}), av(DType::kInt32, {6})});
  Program rem = single_op_program(OpKind::kRem, {av(DType::kInt32, {6}), av(DType::kInt32, {6})});
  EXPECT_EQ(run1(div, {x, y}), (std::vector<double>{3, -3, -3, 3, -1, -2147483648.0}));
  EXPECT_EQ(run1(rem, {x, y}), (std::vector<double>{1, -1, 1, -1, 5, 0}));
}

TEST(ReferenceEval, IntegerArithmeticWrapsToDtype) {
  Buffer x = Buffer::from_vector<int8_t>({127, -128, 100}, {3});
  Buffer y = Buffer::from_vector<int8_t>({1, -1, 100}, {3});
  Program add = single_op_program(OpKind::kAdd, {av(DType::kInt8, {3}), av(DType::kInt8, {3})});
  Program mul = single_op_program(OpKind::kMul, {av(DType::kInt8, {3}), av(DType::kInt8, {3})});
  EXPECT_EQ(run1(add, {x, y}), (std::vector<double>{-128, 127, -56}));
  EXPECT_EQ(run1(mul, {x, y}), (std::vector<double>{127, -128, 16}));  // 10000 mod 256 = 16
}

TEST(ReferenceEval, ConvertSaturatesFloatToIntAndNanIsZero) {
  Buffer x = Buffer::from_vector<float>({1e10f, -1e10f, std::nanf(""), -2.7f, 2.7f}, {5});
  Program p = single_op_program(OpKind::kConvert, {av(DType::kFloat32, {5})}, {{"dtype", DType::kInt32}});
  EXPECT_EQ(run1(p, {x}), (std::vector<double>{2147483647.0, -2147483648.0, 0, -2, 2}));
  Program u = single_op_program(OpKind::kConvert, {av(DType::kFloat32, {5})}, {{"dtype", DType::kUInt8}});
  EXPECT_EQ(run1(u, {x}), (std::vector<double>{255, 0, 0, 0, 2}));
}

TEST(ReferenceEval, RoundIsHalfAwayFromZeroAndF32RoundsPerOp) {
  Buffer x = Buffer::from_vector<double>({0.5, 1.5, 2.5, -0.5, -2.5}, {5});
  Program p = single_op_program(OpKind::kRound, {av(DType::kFloat64, {5})});
  EXPECT_EQ(run1(p, {x}), (std::vector<double>{1, 2, 3, -1, -3}));
  // 1/3 in f32 is not 1/3 in f64.
  Program d = single_op_program(OpKind::kDiv, {av(DType::kFloat32, {}), av(DType::kFloat32, {})});
  auto r = run1(d, {Buffer::scalar<float>(1.0f), Buffer::scalar<float>(3.0f)});
  EXPECT_EQ(r[0], static_cast<double>(1.0f / 3.0f));
}

TEST(ReferenceEval, PadWithNegativeLowAndInterior) {
  // x = [1 2 3], low -1, interior 1, high 2: [1 0 2 0 3] cropped by one at the front, 2 zeros appended.
  Buffer x = Buffer::from_vector<double>({1, 2, 3}, {3});
  Program p = single_op_program(OpKind::kPad, {av(DType::kFloat64, {3}), av(DType::kFloat64, {})},
                                {{"low", Shape{DimExpr(-1)}}, {"high", Shape{DimExpr(2)}},
                                 {"interior", std::vector<int64_t>{1}}});
  EXPECT_EQ(run1(p, {x, Buffer::scalar<double>(9)}), (std::vector<double>{9, 2, 9, 3, 9, 9}));
}

TEST(ReferenceEval, DynamicSliceClampsStartIndices) {
  Buffer x = Buffer::from_vector<double>({0, 1, 2, 3, 4}, {5});
  Program p = single_op_program(OpKind::kDynamicSlice, {av(DType::kFloat64, {5}), av(DType::kInt32, {})},
                                {{"sizes", Shape{DimExpr(2)}}});
  EXPECT_EQ(run1(p, {x, Buffer::scalar<int32_t>(7)}), (std::vector<double>{3, 4}));
  EXPECT_EQ(run1(p, {x, Buffer::scalar<int32_t>(-3)}), (std::vector<double>{0, 1}));
  Program u = single_op_program(OpKind::kDynamicUpdateSlice,
                                {av(DType::kFloat64, {5}), av(DType::kFloat64, {2}), av(DType::kInt32, {})});
  EXPECT_EQ(run1(u, {x, Buffer::from_vector<double>({9, 8}, {2}), Buffer::scalar<int32_t>(4)}),
            (std::vector<double>{0, 1, 2, 9, 8}));
}

TEST(ReferenceEval, ArgmaxTakesFirstIndexAndNanWins) {
  const double nan = std::nan("");
  Buffer x = Buffer::from_vector<double>({1, 5, 5, 2, /*row 2*/ 1, nan, 7, nan}, {2, 4});
  Program p = single_op_program(OpKind::kArgMax, {av(DType::kFloat64, {2, 4})},
                                {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}});
  EXPECT_EQ(run1(p, {x}), (std::vector<double>{1, 1}));
  Program q = single_op_program(OpKind::kArgMin, {av(DType::kFloat64, {2, 4})},
                                {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}});
  EXPECT_EQ(run1(q, {x}), (std::vector<double>{0, 1}));
}

TEST(ReferenceEval, DotGeneralWithBatchAndTakeClamps) {
  // [2,1,2] x [2,2,1] batched matmul.
  Buffer l = Buffer::from_vector<double>({1, 2, 3, 4}, {2, 1, 2});
  Buffer r = Buffer::from_vector<double>({5, 6, 7, 8}, {2, 2, 1});
  Program p = single_op_program(OpKind::kDotGeneral, {av(DType::kFloat64, {2, 1, 2}), av(DType::kFloat64, {2, 2, 1})},
                                {{"lhs_batch", std::vector<int64_t>{0}},
                                 {"rhs_batch", std::vector<int64_t>{0}},
                                 {"lhs_contracting", std::vector<int64_t>{2}},
                                 {"rhs_contracting", std::vector<int64_t>{1}}});
  EXPECT_EQ(run1(p, {l, r}), (std::vector<double>{1 * 5 + 2 * 6, 3 * 7 + 4 * 8}));
  Buffer x = Buffer::from_vector<double>({0, 1, 10, 11, 20, 21}, {3, 2});
  Program t = single_op_program(OpKind::kTake, {av(DType::kFloat64, {3, 2}), av(DType::kInt32, {3})});
  EXPECT_EQ(run1(t, {x, Buffer::from_vector<int32_t>({2, -5, 9}, {3})}),
            (std::vector<double>{20, 21, 0, 1, 20, 21}));
  Program s = single_op_program(OpKind::kScatterAdd,
                                {av(DType::kFloat64, {3, 2}), av(DType::kInt32, {2}), av(DType::kFloat64, {2, 2})});
  EXPECT_EQ(run1(s, {x, Buffer::from_vector<int32_t>({7, 2}, {2}), Buffer::from_vector<double>({1, 2, 3, 4}, {2, 2})}),
            (std::vector<double>{0, 1, 10, 11, 24, 27}));
}

TEST(ReferenceEval, ReductionsCumsumAndSliceStrides) {
  Buffer x = Buffer::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto red = [&](OpKind k, std::vector<int64_t> d) {
    return run1(single_op_program(k, {av(DType::kFloat64, {2, 3})}, {{"dimensions", d}}), {x});
  };
  EXPECT_EQ(red(OpKind::kReduceSum, {1}), (std::vector<double>{6, 15}));
  EXPECT_EQ(red(OpKind::kReduceProd, {0}), (std::vector<double>{4, 10, 18}));
  EXPECT_EQ(red(OpKind::kReduceMax, {0, 1}), (std::vector<double>{6}));
  EXPECT_EQ(red(OpKind::kReduceMin, {1}), (std::vector<double>{1, 4}));
  Program c = single_op_program(OpKind::kCumsum, {av(DType::kFloat64, {2, 3})},
                                {{"dimension", int64_t{1}}, {"reverse", int64_t{1}}});
  EXPECT_EQ(run1(c, {x}), (std::vector<double>{6, 5, 3, 15, 11, 6}));
  Program s = single_op_program(OpKind::kSlice, {av(DType::kFloat64, {2, 3})},
                                {{"start", Shape{DimExpr(0), DimExpr(0)}},
                                 {"limit", Shape{DimExpr(2), DimExpr(3)}},
                                 {"strides", std::vector<int64_t>{1, 2}}});
  EXPECT_EQ(run1(s, {x}), (std::vector<double>{1, 3, 4, 6}));
}

TEST(ReferenceEval, RejectsWrongArguments) {
  Program p = single_op_program(OpKind::kNeg, {av(DType::kFloat64, {2})});
  auto r = reference_evaluate(p, std::vector<Buffer>{Buffer::zeros(DType::kFloat32, {2})});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("[reference_evaluate]"), std::string::npos);
}

TEST(TestUtil, BuffersNearReportsFirstMismatch) {
  Buffer a = Buffer::from_vector<double>({1, 2, 3, 4}, {2, 2});
  Buffer b = Buffer::from_vector<double>({1, 2, 3.5, 4}, {2, 2});
  EXPECT_TRUE(buffers_near(a, a, 0, 0));
  ::testing::AssertionResult r = buffers_near(a, b, 1e-3, 0);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("[1,0]"), std::string::npos) << r.message();
  Buffer r1 = random_buffer(DType::kFloat32, {3, 4}, 7), r2 = random_buffer(DType::kFloat32, {3, 4}, 7);
  EXPECT_TRUE(r1.bitwise_equal(r2));
  EXPECT_FALSE(r1.bitwise_equal(random_buffer(DType::kFloat32, {3, 4}, 8)));
  Buffer ints = random_buffer(DType::kInt32, {100}, 1, -3, 3);
  for (double v : ints.to_doubles()) {
    EXPECT_GE(v, -3);
    EXPECT_LE(v, 3);
  }
}

}  // namespace
}  // namespace mcx::test

namespace mcx::test {
namespace {

using ir::OpKind;
using ir::Program;

AbstractValue av2(DType t, std::vector<int64_t> dims) { return {t, concrete_shape(dims)}; }

std::vector<double> eval1(const Program& p, const std::vector<Buffer>& args) {
  auto r = reference_evaluate(p, args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0].to_doubles() : std::vector<double>{};
}

TEST(ReferenceEval, LowPrecisionFloatsRoundPerOp) {
  // 1 + 2^-9 is not representable in bf16 (8 significant bits): it rounds to 1; f16 keeps it.
  const double tiny = std::ldexp(1.0, -9);
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Program p = single_op_program(OpKind::kAdd, {av2(t, {}), av2(t, {})});
    std::vector<double> r = eval1(p, {scalar_buffer(t, 1.0), scalar_buffer(t, tiny)});
    EXPECT_EQ(r[0], t == DType::kBFloat16 ? 1.0 : 1.0 + tiny) << dtype_name(t);
  }
}

TEST(ReferenceEval, ComparisonsWithNanAndLogicalOps) {
  const double nan = std::nan("");
  Buffer x = Buffer::from_vector<double>({1, nan, 2}, {3});
  Buffer y = Buffer::from_vector<double>({1, nan, 3}, {3});
  auto cmp = [&](OpKind k) { return eval1(single_op_program(k, {av2(DType::kFloat64, {3}), av2(DType::kFloat64, {3})}), {x, y}); };
  EXPECT_EQ(cmp(OpKind::kEq), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(cmp(OpKind::kNe), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(cmp(OpKind::kLt), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(cmp(OpKind::kGe), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(eval1(single_op_program(OpKind::kIsFinite, {av2(DType::kFloat64, {3})}), {x}), (std::vector<double>{1, 0, 1}));
  Buffer mx = Buffer::from_vector<double>({1, 5, nan}, {3});
  EXPECT_TRUE(std::isnan(eval1(single_op_program(OpKind::kMax, {av2(DType::kFloat64, {3}), av2(DType::kFloat64, {3})}),
                               {mx, x})[2]));
  Buffer a = Buffer::from_vector<int32_t>({0b1100, -1, 5}, {3});
  Buffer b = Buffer::from_vector<int32_t>({0b1010, 0, 3}, {3});
  auto bit = [&](OpKind k) { return eval1(single_op_program(k, {av2(DType::kInt32, {3}), av2(DType::kInt32, {3})}), {a, b}); };
  EXPECT_EQ(bit(OpKind::kAnd), (std::vector<double>{0b1000, 0, 1}));
  EXPECT_EQ(bit(OpKind::kOr), (std::vector<double>{0b1110, -1, 7}));
  EXPECT_EQ(bit(OpKind::kXor), (std::vector<double>{0b0110, -1, 6}));
  EXPECT_EQ(eval1(single_op_program(OpKind::kNot, {av2(DType::kInt32, {3})}), {a}), (std::vector<double>{-13, 0, -6}));
  Buffer p = Buffer::from_vector<bool>({true, false}, {2});
  EXPECT_EQ(eval1(single_op_program(OpKind::kNot, {av2(DType::kBool, {2})}), {p}), (std::vector<double>{0, 1}));
  Buffer u = Buffer::from_vector<uint8_t>({0, 200}, {2});
  EXPECT_EQ(eval1(single_op_program(OpKind::kNot, {av2(DType::kUInt8, {2})}), {u}), (std::vector<double>{255, 55}));
}

TEST(ReferenceEval, IntegerPowSignAbsAndUnsignedDivByZero) {
  Buffer x = Buffer::from_vector<int32_t>({2, -3, 1, -1, 5, 0}, {6});
  Buffer y = Buffer::from_vector<int32_t>({10, 3, -4, -3, -1, 0}, {6});
  EXPECT_EQ(eval1(single_op_program(OpKind::kPow, {av2(DType::kInt32, {6}), av2(DType::kInt32, {6})}), {x, y}),
            (std::vector<double>{1024, -27, 1, -1, 0, 1}));
  EXPECT_EQ(eval1(single_op_program(OpKind::kSign, {av2(DType::kInt32, {6})}), {x}),
            (std::vector<double>{1, -1, 1, -1, 1, 0}));
  EXPECT_EQ(eval1(single_op_program(OpKind::kAbs, {av2(DType::kInt32, {6})}), {x}), (std::vector<double>{2, 3, 1, 1, 5, 0}));
  Buffer ux = Buffer::from_vector<uint32_t>({7, 7}, {2}), uy = Buffer::from_vector<uint32_t>({0, 2}, {2});
  EXPECT_EQ(eval1(single_op_program(OpKind::kDiv, {av2(DType::kUInt32, {2}), av2(DType::kUInt32, {2})}), {ux, uy}),
            (std::vector<double>{4294967295.0, 3}));
}

TEST(ReferenceEval, IotaBroadcastTransposeReverseConcatenate) {
  Program io = single_op_program(OpKind::kIota, {}, {{"dtype", DType::kInt32}, {"shape", concrete_shape({2, 3})},
                                                     {"dimension", int64_t{1}}});
  EXPECT_EQ(eval1(io, {}), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  Buffer x = Buffer::from_vector<double>({1, 2, 3}, {3});
  Program bc = single_op_program(OpKind::kBroadcastInDim, {av2(DType::kFloat64, {3})},
                                 {{"shape", concrete_shape({3, 2})}, {"broadcast_dimensions", std::vector<int64_t>{0}}});
  EXPECT_EQ(eval1(bc, {x}), (std::vector<double>{1, 1, 2, 2, 3, 3}));
  Buffer m = Buffer::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Program tr = single_op_program(OpKind::kTranspose, {av2(DType::kFloat64, {2, 3})}, {{"permutation", std::vector<int64_t>{1, 0}}});
  EXPECT_EQ(eval1(tr, {m}), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  Program rv = single_op_program(OpKind::kReverse, {av2(DType::kFloat64, {2, 3})}, {{"dimensions", std::vector<int64_t>{1}}});
  EXPECT_EQ(eval1(rv, {m}), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  Program ct = single_op_program(OpKind::kConcatenate, {av2(DType::kFloat64, {2, 3}), av2(DType::kFloat64, {2, 1})},
                                 {{"dimension", int64_t{1}}});
  EXPECT_EQ(eval1(ct, {m, Buffer::from_vector<double>({9, 8}, {2, 1})}), (std::vector<double>{1, 2, 3, 9, 4, 5, 6, 8}));
  Program cl = single_op_program(OpKind::kClamp, {av2(DType::kFloat64, {3}), av2(DType::kFloat64, {3}), av2(DType::kFloat64, {3})});
  EXPECT_EQ(eval1(cl, {Buffer::from_vector<double>({0, 0, 0}, {3}), Buffer::from_vector<double>({-1, 0.5, 7}, {3}),
                       Buffer::from_vector<double>({1, 1, 1}, {3})}),
            (std::vector<double>{0, 0.5, 1}));
}

TEST(ReferenceEval, EmptyReductionsGiveIdentities) {
  Buffer e = Buffer::zeros(DType::kFloat64, {0, 2});
  auto red = [&](OpKind k) {
    return eval1(single_op_program(k, {av2(DType::kFloat64, {0, 2})}, {{"dimensions", std::vector<int64_t>{0}}}), {e});
  };
  EXPECT_EQ(red(OpKind::kReduceSum), (std::vector<double>{0, 0}));
  EXPECT_EQ(red(OpKind::kReduceProd), (std::vector<double>{1, 1}));
  EXPECT_EQ(red(OpKind::kReduceMax)[0], -std::numeric_limits<double>::infinity());
  Buffer ei = Buffer::zeros(DType::kInt8, {0});
  EXPECT_EQ(eval1(single_op_program(OpKind::kReduceMin, {av2(DType::kInt8, {0})}, {{"dimensions", std::vector<int64_t>{0}}}), {ei}),
            (std::vector<double>{127}));
}

}  // namespace
}  // namespace mcx::test
