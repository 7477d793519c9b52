// Every differentiable op's VJP rule against central finite differences, in float64 through the
// reference evaluator (so tolerances can be tight), with several attribute variants per op.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/shape_rules.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::Attrs;
using ir::OpKind;
using ir::Program;
using V = std::vector<int64_t>;

AbstractValue f64(V dims) { return {DType::kFloat64, concrete_shape(dims)}; }
AbstractValue i32(V dims) { return {DType::kInt32, concrete_shape(dims)}; }
Buffer rnd(V dims, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random_buffer(DType::kFloat64, std::move(dims), seed, lo, hi);
}
Buffer idx(int32_t v) { return Buffer::scalar<int32_t>(v); }

// ---- unary -------------------------------------------------------------------------------------------

struct UnaryCase {
  OpKind kind;
  double lo, hi;  // input domain (away from kinks and singularities)
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << ir::op_name(c.kind); }

class UnaryVjp : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryVjp, MatchesFiniteDifferences) {
  const UnaryCase c = GetParam();
  Program f = single_op_program(c.kind, {f64({3, 4})});
  Buffer x = c.kind == OpKind::kAbs ? random_buffer_away_from_zero(DType::kFloat64, {3, 4}, 11, 0.1, 2.0)
                                    : rnd({3, 4}, 11, c.lo, c.hi);
  check_vjp(f, {x}, {0}, 5);
}

INSTANTIATE_TEST_SUITE_P(
    AllUnary, UnaryVjp,
    ::testing::Values(UnaryCase{OpKind::kNeg, -2, 2}, UnaryCase{OpKind::kAbs, 0, 0}, UnaryCase{OpKind::kExp, -2, 2},
                      UnaryCase{OpKind::kLog, 0.2, 3}, UnaryCase{OpKind::kLog1p, -0.5, 3},
                      UnaryCase{OpKind::kExpm1, -2, 2}, UnaryCase{OpKind::kTanh, -2, 2},
                      UnaryCase{OpKind::kLogistic, -3, 3}, UnaryCase{OpKind::kSqrt, 0.2, 3},
                      UnaryCase{OpKind::kRsqrt, 0.2, 3}, UnaryCase{OpKind::kSin, -3, 3},
                      UnaryCase{OpKind::kCos, -3, 3}, UnaryCase{OpKind::kErf, -2, 2},
                      UnaryCase{OpKind::kErfc, -2, 2}, UnaryCase{OpKind::kErfInv, -0.9, 0.9},
                      // Non-differentiable ops: the gradient is zero, as is the finite difference
                      // away from their jumps.
                      UnaryCase{OpKind::kFloor, 0.1, 0.9}, UnaryCase{OpKind::kCeil, 0.1, 0.9},
                      UnaryCase{OpKind::kRound, 0.1, 0.4}, UnaryCase{OpKind::kSign, 0.1, 2}),
    [](const ::testing::TestParamInfo<UnaryCase>& i) { return std::string(ir::op_name(i.param.kind)); });

TEST(Vjp, StopGradientBlocksTheCotangent) {
  // f(x) = x * stop_gradient(x): df/dx = stop_gradient(x) = x, not 2x.
  ir::ProgramBuilder b;
  ir::ValueId x = b.add_parameter(f64({4}));
  ir::ValueId y = b.binary(OpKind::kMul, x, b.unary(OpKind::kStopGradient, x));
  Program f = std::move(b).build({y});
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  Buffer xv = rnd({4}, 3), ct = rnd({4}, 4);
  auto out = reference_evaluate(*vjp, std::vector<Buffer>{xv, ct});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want(4);
  for (int k = 0; k < 4; ++k) want[k] = xv.data<double>()[k] * ct.data<double>()[k];
  expect_buffers_near((*out)[1], Buffer::from_vector<double>(want, {4}), 1e-15, 0);
}

TEST(Vjp, ConvertBetweenFloatTypes) {
  // f64 -> f32 -> f64: the gradient is the cotangent rounded through f32; finite differences see f32
  // rounding, hence the looser tolerance and the larger step.
  ir::ProgramBuilder b;
  ir::ValueId x = b.add_parameter(f64({5}));
  ir::ValueId y = b.convert(b.unary(OpKind::kSin, b.convert(x, DType::kFloat32)), DType::kFloat64);
  Program f = std::move(b).build({y});
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  EXPECT_EQ(vjp->type(vjp->results[1]), f64({5}));
  Buffer xv = rnd({5}, 8), ct = rnd({5}, 9);
  auto out = reference_evaluate(*vjp, std::vector<Buffer>{xv, ct});
  ASSERT_TRUE(out.ok());
  auto fd = numerical_vjp(f, std::vector<Buffer>{xv}, std::vector<Buffer>{ct}, {0}, 1e-2);
  ASSERT_TRUE(fd.ok());
  expect_buffers_near((*out)[1], (*fd)[0], 1e-3, 1e-4);
}

// ---- binary and ternary ------------------------------------------------------------------------------

TEST(Vjp, ArithmeticBinaryOps) {
  for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kMax, OpKind::kMin}) {
    SCOPED_TRACE(std::string(ir::op_name(k)));
    Program f = single_op_program(k, {f64({2, 3}), f64({2, 3})});
    Buffer y = k == OpKind::kDiv ? random_buffer_away_from_zero(DType::kFloat64, {2, 3}, 2, 0.5, 2) : rnd({2, 3}, 2);
    check_vjp(f, {rnd({2, 3}, 1), y}, {0, 1}, 3);
    check_vjp(f, {rnd({2, 3}, 1), y}, {1}, 4);  // only one side wanted
  }
}

TEST(Vjp, PowInBothArguments) {
  Program f = single_op_program(OpKind::kPow, {f64({6}), f64({6})});
  check_vjp(f, {rnd({6}, 1, 0.3, 2.5), rnd({6}, 2, -2, 3)}, {0, 1}, 7);
}

TEST(Vjp, PowAtZeroBaseAndZeroExponentIsFinite) {
  // JAX's conventions: d/dy x^y at x == 0 uses log(1) = 0; d/dx at y == 0 is 0.
  Program f = single_op_program(OpKind::kPow, {f64({2}), f64({2})});
  auto vjp = ir::vjp_program(f, {0, 1});
  ASSERT_TRUE(vjp.ok());
  auto out = reference_evaluate(*vjp, std::vector<Buffer>{Buffer::from_vector<double>({0.0, 2.0}, {2}),
                                                          Buffer::from_vector<double>({2.0, 0.0}, {2}),
                                                          Buffer::from_vector<double>({1.0, 1.0}, {2})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[1].to_doubles(), (std::vector<double>{0.0, 0.0}));            // 2*0^1, 0
  EXPECT_EQ((*out)[2].to_doubles(), (std::vector<double>{0.0, std::log(2.0)}));  // 0*log(1), 1*log 2
}

TEST(Vjp, RemInBothArguments) {
  // x = y * (q + frac) with frac in [0.2, 0.8], away from rem's jumps.
  Buffer y = random_buffer_away_from_zero(DType::kFloat64, {6}, 3, 0.5, 2.0);
  Buffer frac = rnd({6}, 4, 0.2, 0.8);
  std::vector<double> xs(6);
  const double q[6] = {0, 1, 2, -1, -3, 4};
  for (int k = 0; k < 6; ++k) xs[k] = y.data<double>()[k] * (q[k] + (q[k] < 0 ? -1 : 1) * frac.data<double>()[k]);
  Program f = single_op_program(OpKind::kRem, {f64({6}), f64({6})});
  check_vjp(f, {Buffer::from_vector<double>(xs, {6}), y}, {0, 1}, 9);
}

TEST(Vjp, MaxTiesSplitTheCotangentEvenly) {
  Program f = single_op_program(OpKind::kMax, {f64({3}), f64({3})});
  auto vjp = ir::vjp_program(f, {0, 1});
  ASSERT_TRUE(vjp.ok());
  auto out = reference_evaluate(*vjp, std::vector<Buffer>{Buffer::from_vector<double>({1, 2, 3}, {3}),
                                                          Buffer::from_vector<double>({1, 5, 0}, {3}),
                                                          Buffer::from_vector<double>({4, 4, 4}, {3})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[1].to_doubles(), (std::vector<double>{2, 0, 4}));
  EXPECT_EQ((*out)[2].to_doubles(), (std::vector<double>{2, 4, 0}));
}

TEST(Vjp, SelectAndClamp) {
  Program s = single_op_program(OpKind::kSelect, {AbstractValue{DType::kBool, concrete_shape({5})}, f64({5}), f64({5})});
  Buffer pred = Buffer::from_vector<bool>({true, false, true, true, false}, {5});
  check_vjp(s, {pred, rnd({5}, 1), rnd({5}, 2)}, {1, 2}, 3);
  // clamp(lo, x, hi) with x below, inside and above [lo, hi].
  Program c = single_op_program(OpKind::kClamp, {f64({6}), f64({6}), f64({6})});
  Buffer lo = Buffer::from_vector<double>({-1, -1, -1, 0, 0, 0}, {6});
  Buffer x = Buffer::from_vector<double>({-2, 0.5, 3, -0.3, 0.4, 1.7}, {6});
  Buffer hi = Buffer::from_vector<double>({1, 1, 1, 1, 1, 1}, {6});
  check_vjp(c, {lo, x, hi}, {0, 1, 2}, 4);
}

// ---- shape manipulation ------------------------------------------------------------------------------

TEST(Vjp, BroadcastInDim) {
  check_vjp(single_op_program(OpKind::kBroadcastInDim, {f64({3})},
                              {{"shape", concrete_shape({2, 3, 4})}, {"broadcast_dimensions", V{1}}}),
            {rnd({3}, 1)}, {0}, 2);
  check_vjp(single_op_program(OpKind::kBroadcastInDim, {f64({1, 3})},
                              {{"shape", concrete_shape({4, 3})}, {"broadcast_dimensions", V{0, 1}}}),
            {rnd({1, 3}, 1)}, {0}, 3);
  check_vjp(single_op_program(OpKind::kBroadcastInDim, {f64({})},
                              {{"shape", concrete_shape({2, 2})}, {"broadcast_dimensions", V{}}}),
            {rnd({}, 1)}, {0}, 4);
  check_vjp(single_op_program(OpKind::kBroadcastInDim, {f64({2, 1})},
                              {{"shape", concrete_shape({2, 5, 3})}, {"broadcast_dimensions", V{0, 2}}}),
            {rnd({2, 1}, 1)}, {0}, 5);
}

TEST(Vjp, ReshapeTransposeReverse) {
  check_vjp(single_op_program(OpKind::kReshape, {f64({2, 3, 4})}, {{"shape", concrete_shape({6, 4})}}),
            {rnd({2, 3, 4}, 1)}, {0}, 2);
  check_vjp(single_op_program(OpKind::kTranspose, {f64({2, 3, 4})}, {{"permutation", V{2, 0, 1}}}),
            {rnd({2, 3, 4}, 1)}, {0}, 3);
  check_vjp(single_op_program(OpKind::kReverse, {f64({2, 3, 4})}, {{"dimensions", V{0, 2}}}),
            {rnd({2, 3, 4}, 1)}, {0}, 4);
}

TEST(Vjp, SliceWithStrides) {
  auto slice = [](V in, V start, V limit, V strides) {
    return single_op_program(OpKind::kSlice, {f64(in)},
                             {{"start", concrete_shape(start)}, {"limit", concrete_shape(limit)}, {"strides", strides}});
  };
  check_vjp(slice({7, 5}, {1, 0}, {6, 5}, {2, 3}), {rnd({7, 5}, 1)}, {0}, 2);
  check_vjp(slice({7, 5}, {2, 1}, {4, 4}, {1, 1}), {rnd({7, 5}, 1)}, {0}, 3);
  check_vjp(slice({8}, {0}, {8}, {3}), {rnd({8}, 1)}, {0}, 4);
  check_vjp(slice({4, 3}, {2, 0}, {2, 3}, {2, 1}), {rnd({4, 3}, 1)}, {0}, 5);  // empty slice
}

TEST(Vjp, DynamicSliceAndUpdateIncludingClampedStarts) {
  Program ds = single_op_program(OpKind::kDynamicSlice, {f64({5, 4}), i32({}), i32({})},
                                 {{"sizes", concrete_shape({2, 3})}});
  check_vjp(ds, {rnd({5, 4}, 1), idx(1), idx(1)}, {0}, 2);
  check_vjp(ds, {rnd({5, 4}, 1), idx(9), idx(-2)}, {0}, 3);  // clamped to (3, 0)
  Program dus = single_op_program(OpKind::kDynamicUpdateSlice, {f64({5, 4}), f64({2, 3}), i32({}), i32({})});
  check_vjp(dus, {rnd({5, 4}, 1), rnd({2, 3}, 2), idx(2), idx(1)}, {0, 1}, 4);
  check_vjp(dus, {rnd({5, 4}, 1), rnd({2, 3}, 2), idx(7), idx(-1)}, {0, 1}, 5);
}

TEST(Vjp, Concatenate) {
  Program f = single_op_program(OpKind::kConcatenate, {f64({2, 1}), f64({2, 3}), f64({2, 2})}, {{"dimension", int64_t{1}}});
  check_vjp(f, {rnd({2, 1}, 1), rnd({2, 3}, 2), rnd({2, 2}, 3)}, {0, 1, 2}, 4);
  check_vjp(f, {rnd({2, 1}, 1), rnd({2, 3}, 2), rnd({2, 2}, 3)}, {1}, 5);
}

TEST(Vjp, PadWithInteriorAndNegativeEdges) {
  auto pad = [](V in, Shape low, Shape high, V interior) {
    return single_op_program(OpKind::kPad, {f64(in), f64({})},
                             {{"low", std::move(low)}, {"high", std::move(high)}, {"interior", interior}});
  };
  check_vjp(pad({3, 4}, {DimExpr(1), DimExpr(0)}, {DimExpr(2), DimExpr(1)}, {1, 2}), {rnd({3, 4}, 1), rnd({}, 2)},
            {0, 1}, 3);
  check_vjp(pad({3, 4}, {DimExpr(-1), DimExpr(2)}, {DimExpr(1), DimExpr(-3)}, {1, 0}), {rnd({3, 4}, 1), rnd({}, 2)},
            {0, 1}, 4);
  check_vjp(pad({5}, {DimExpr(-2)}, {DimExpr(-2)}, {0}), {rnd({5}, 1), rnd({}, 2)}, {0, 1}, 5);
}

// ---- reductions --------------------------------------------------------------------------------------

TEST(Vjp, ReduceSumOverSeveralAxes) {
  for (V d : {V{0}, V{1}, V{0, 2}, V{0, 1, 2}}) {
    check_vjp(single_op_program(OpKind::kReduceSum, {f64({2, 3, 4})}, {{"dimensions", d}}), {rnd({2, 3, 4}, 1)},
              {0}, 2);
  }
}

TEST(Vjp, ReduceMaxMinDistinctValues) {
  for (OpKind k : {OpKind::kReduceMax, OpKind::kReduceMin}) {
    for (V d : {V{1}, V{0, 2}, V{0, 1, 2}}) {
      check_vjp(single_op_program(k, {f64({2, 3, 4})}, {{"dimensions", d}}), {rnd({2, 3, 4}, 7)}, {0}, 2);
    }
  }
}

TEST(Vjp, ReduceMaxTiesSplitEvenly) {
  Program f = single_op_program(OpKind::kReduceMax, {f64({2, 3})}, {{"dimensions", V{1}}});
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok());
  auto out = reference_evaluate(*vjp, std::vector<Buffer>{Buffer::from_vector<double>({1, 3, 3, 2, 2, 2}, {2, 3}),
                                                          Buffer::from_vector<double>({6, 9}, {2})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[1].to_doubles(), (std::vector<double>{0, 3, 3, 3, 3, 3}));
}

TEST(Vjp, ReduceProdIncludingZeros) {
  Program f = single_op_program(OpKind::kReduceProd, {f64({3, 4})}, {{"dimensions", V{1}}});
  check_vjp(f, {rnd({3, 4}, 1, 0.5, 2)}, {0}, 2);
  // One zero in row 0, two zeros in row 1, none in row 2: the product is a polynomial, so finite
  // differences are exact enough even at the zeros.
  Buffer x = Buffer::from_vector<double>({0.5, 0, 1.5, -2, 0, 1.25, 0, 3, 1.5, -0.5, 2, 0.75}, {3, 4});
  check_vjp(f, {x}, {0}, 3);
  check_vjp(single_op_program(OpKind::kReduceProd, {f64({3, 4})}, {{"dimensions", V{0, 1}}}), {rnd({3, 4}, 4, 0.5, 1.5)},
            {0}, 5);
}

// ---- dot_general -------------------------------------------------------------------------------------

struct DotCase {
  std::string name;
  V lhs, rhs, lb, rb, lc, rc;
};

void PrintTo(const DotCase& c, std::ostream* os) { *os << c.name; }

class DotGeneralVjp : public ::testing::TestWithParam<DotCase> {};

TEST_P(DotGeneralVjp, MatchesFiniteDifferences) {
  const DotCase& c = GetParam();
  Program f = single_op_program(OpKind::kDotGeneral, {f64(c.lhs), f64(c.rhs)},
                                {{"lhs_batch", c.lb}, {"rhs_batch", c.rb}, {"lhs_contracting", c.lc}, {"rhs_contracting", c.rc}});
  check_vjp(f, {rnd(c.lhs, 1), rnd(c.rhs, 2)}, {0, 1}, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, DotGeneralVjp,
    ::testing::Values(DotCase{"matmul", {3, 4}, {4, 5}, {}, {}, {1}, {0}},
                      DotCase{"transposed_both", {4, 3}, {5, 4}, {}, {}, {0}, {1}},
                      DotCase{"batched", {2, 3, 4}, {2, 4, 5}, {0}, {0}, {2}, {1}},
                      DotCase{"two_contracting_reordered", {2, 3, 4}, {4, 3, 5}, {}, {}, {1, 2}, {1, 0}},
                      DotCase{"batch_in_middle", {3, 2, 4}, {4, 5, 2}, {1}, {2}, {2}, {0}},
                      DotCase{"batch_order_swapped", {2, 3, 4, 5}, {3, 2, 5, 6}, {0, 1}, {1, 0}, {3}, {2}},
                      // (contract, batch, kept) layouts whose transposes are 3-cycles, not involutions.
                      DotCase{"cyclic_layout", {4, 2, 3}, {2, 4, 5}, {1}, {0}, {0}, {1}},
                      DotCase{"cyclic_layout_rhs", {2, 3, 4}, {5, 4, 2}, {0}, {2}, {2}, {1}},
                      DotCase{"outer_product", {3}, {4}, {}, {}, {}, {}},
                      DotCase{"vector_dot", {4}, {4}, {}, {}, {0}, {0}},
                      DotCase{"batch_only", {2, 3}, {2, 3}, {0, 1}, {0, 1}, {}, {}}),
    [](const ::testing::TestParamInfo<DotCase>& i) { return i.param.name; });

// ---- scans and indexing ------------------------------------------------------------------------------

TEST(Vjp, CumsumBothDirections) {
  for (int64_t rev : {0, 1}) {
    for (int64_t dim : {0, 1}) {
      check_vjp(single_op_program(OpKind::kCumsum, {f64({3, 4})}, {{"dimension", dim}, {"reverse", rev}}),
                {rnd({3, 4}, 1)}, {0}, 2);
    }
  }
}

TEST(Vjp, TakeWithDuplicateAndClampedIndices) {
  Program f = single_op_program(OpKind::kTake, {f64({5, 3}), i32({2, 3})});
  check_vjp(f, {rnd({5, 3}, 1), Buffer::from_vector<int32_t>({0, 4, 4, -2, 9, 2}, {2, 3})}, {0}, 2);
}

TEST(Vjp, ScatterAddIntoOperandAndUpdates) {
  Program f = single_op_program(OpKind::kScatterAdd, {f64({5, 3}), i32({4}), f64({4, 3})});
  check_vjp(f, {rnd({5, 3}, 1), Buffer::from_vector<int32_t>({1, 1, 7, 0}, {4}), rnd({4, 3}, 2)}, {0, 2}, 3);
}

TEST(Vjp, NonDifferentiableOpsGiveZero) {
  // f(x) = x * convert(argmax(x)) + iota: only the product with the (constant) index contributes.
  ir::ProgramBuilder b;
  ir::ValueId x = b.add_parameter(f64({4}));
  ir::ValueId am = b.emit_or_throw(OpKind::kArgMax, {x}, {{"dimension", int64_t{0}}, {"index_dtype", DType::kInt32}});
  ir::ValueId amf = b.broadcast_in_dim(b.convert(am, DType::kFloat64), concrete_shape({4}), {});
  ir::ValueId io = b.emit_or_throw(OpKind::kIota, {}, {{"dtype", DType::kFloat64}, {"shape", concrete_shape({4})},
                                                       {"dimension", int64_t{0}}});
  ir::ValueId y = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, x, amf), io);
  ir::ValueId lt = b.convert(b.binary(OpKind::kLt, x, io), DType::kFloat64);
  ir::ValueId out = b.binary(OpKind::kAdd, y, lt);
  Program f = std::move(b).build({out});
  check_vjp(f, {Buffer::from_vector<double>({0.3, 2.6, -1.2, 0.9}, {4})}, {0}, 2);
}

}  // namespace
}  // namespace mcx::test
