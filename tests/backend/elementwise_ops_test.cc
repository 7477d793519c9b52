// Every element-wise op x every dtype it accepts x shapes (scalar, empty, odd, multi-tile) against the
// reference evaluator.
#include <cmath>
#include <limits>

#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;

const std::vector<std::vector<int64_t>>& test_shapes() {
  static const std::vector<std::vector<int64_t>> s = {{}, {0}, {7}, {3, 5}, {2, 0, 3}, {3, 1031}};
  return s;
}

struct Range { double lo, hi; };

Range unary_range(OpKind k) {
  switch (k) {
    case OpKind::kLog: case OpKind::kSqrt: case OpKind::kRsqrt: return {0.05, 8};
    case OpKind::kLog1p: return {-0.9, 6};
    case OpKind::kExp: case OpKind::kExpm1: return {-8, 8};
    default: return {-6, 6};
  }
}

void check_unary(OpKind k, DType t, uint64_t seed) {
  for (const auto& dims : test_shapes()) {
    SCOPED_TRACE(std::string(ir::op_name(k)) + " " + std::string(dtype_short_name(t)) + dims_str(dims));
    Range r = unary_range(k);
    if (is_unsigned_integer(t)) r = {0, 200};
    ir::Program p = test::single_op_program(k, {{t, concrete_shape(dims)}});
    expect_matches_reference(p, {test::random_buffer(t, dims, seed, r.lo, r.hi)});
  }
}

TEST(ElementwiseOps, UnaryFloat) {
  const OpKind kinds[] = {OpKind::kNeg, OpKind::kAbs, OpKind::kSign, OpKind::kExp, OpKind::kLog, OpKind::kLog1p,
                          OpKind::kExpm1, OpKind::kTanh, OpKind::kLogistic, OpKind::kSqrt, OpKind::kRsqrt,
                          OpKind::kFloor, OpKind::kCeil, OpKind::kRound, OpKind::kSin, OpKind::kCos,
                          OpKind::kStopGradient};
  uint64_t seed = 1;
  for (OpKind k : kinds) {
    for (DType t : float_dtypes()) check_unary(k, t, seed++);
  }
}

TEST(ElementwiseOps, UnaryIntegerAndBool) {
  uint64_t seed = 100;
  for (DType t : int_dtypes()) {
    for (OpKind k : {OpKind::kNeg, OpKind::kAbs, OpKind::kSign, OpKind::kNot, OpKind::kStopGradient}) {
      check_unary(k, t, seed++);
    }
  }
  check_unary(OpKind::kNot, DType::kBool, seed++);
}

TEST(ElementwiseOps, IsFinite) {
  for (DType t : float_dtypes()) {
    Buffer x = test::buffer_from_doubles(t, {6}, {1.0, -0.0, INFINITY, -INFINITY, NAN, 65000.0});
    ir::Program p = test::single_op_program(OpKind::kIsFinite, {x.abstract_value()});
    expect_matches_reference(p, {x});
  }
}

void check_binary(OpKind k, DType t, uint64_t seed, Range r) {
  for (const auto& dims : test_shapes()) {
    SCOPED_TRACE(std::string(ir::op_name(k)) + " " + std::string(dtype_short_name(t)) + dims_str(dims));
    AbstractValue av{t, concrete_shape(dims)};
    ir::Program p = test::single_op_program(k, {av, av});
    Buffer x = test::random_buffer(t, dims, seed, r.lo, r.hi);
    Buffer y = test::random_buffer(t, dims, seed + 7, r.lo, r.hi);
    if (k == OpKind::kPow && is_floating(t)) y = test::random_buffer(t, dims, seed + 7, -2, 2);
    if (k == OpKind::kPow && !is_floating(t)) y = test::random_buffer(t, dims, seed + 7, 0, 5);
    expect_matches_reference(p, {x, y});
  }
}

TEST(ElementwiseOps, BinaryArithmetic) {
  uint64_t seed = 200;
  for (DType t : float_dtypes()) {
    for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kRem, OpKind::kMax,
                     OpKind::kMin}) {
      check_binary(k, t, seed++, {-5, 5});
    }
    check_binary(OpKind::kPow, t, seed++, {0.1, 3});
  }
  for (DType t : int_dtypes()) {
    const Range r = is_unsigned_integer(t) ? Range{0, 250} : Range{-120, 120};
    for (OpKind k : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kRem, OpKind::kMax,
                     OpKind::kMin, OpKind::kAnd, OpKind::kOr, OpKind::kXor}) {
      check_binary(k, t, seed++, r);
    }
    // Small values so that zero divisors (x / 0 == -1, x % 0 == x) occur often.
    check_binary(OpKind::kDiv, t, seed++, {0, 3});
    check_binary(OpKind::kRem, t, seed++, {0, 3});
    check_binary(OpKind::kPow, t, seed++, is_unsigned_integer(t) ? Range{0, 6} : Range{-4, 6});
  }
  for (OpKind k : {OpKind::kAnd, OpKind::kOr, OpKind::kXor}) check_binary(k, DType::kBool, seed++, {0, 1});
}

TEST(ElementwiseOps, IntegerEdgeCases) {
  // INT_MIN / -1 and INT_MIN % -1, wraparound of add/mul/neg.
  const double mn = static_cast<double>(std::numeric_limits<int32_t>::min());
  Buffer x = test::buffer_from_doubles(DType::kInt32, {5}, {mn, mn, 7, -7, 2147483647});
  Buffer y = test::buffer_from_doubles(DType::kInt32, {5}, {-1, 0, 0, 2, 2});
  for (OpKind k : {OpKind::kDiv, OpKind::kRem, OpKind::kAdd, OpKind::kMul, OpKind::kSub}) {
    SCOPED_TRACE(std::string(ir::op_name(k)));
    ir::Program p = test::single_op_program(k, {x.abstract_value(), y.abstract_value()});
    expect_matches_reference(p, {x, y});
  }
}

TEST(ElementwiseOps, FloatMaxMinPropagateNaN) {
  Buffer x = test::buffer_from_doubles(DType::kFloat32, {4}, {NAN, 1, NAN, -0.0});
  Buffer y = test::buffer_from_doubles(DType::kFloat32, {4}, {1, NAN, NAN, 2});
  for (OpKind k : {OpKind::kMax, OpKind::kMin}) {
    ir::Program p = test::single_op_program(k, {x.abstract_value(), y.abstract_value()});
    std::vector<Buffer> got = run_cpu(p, {x, y});
    ASSERT_EQ(got.size(), 1u);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(got[0].data<float>()[i])) << i;
    expect_matches_reference(p, {x, y});
  }
}

TEST(ElementwiseOps, Compare) {
  uint64_t seed = 300;
  for (DType t : all_dtypes()) {
    for (OpKind k : {OpKind::kEq, OpKind::kNe, OpKind::kLt, OpKind::kLe, OpKind::kGt, OpKind::kGe}) {
      // A narrow integer range makes equal pairs common.
      check_binary(k, t, seed++, {0, 3});
    }
  }
}

TEST(ElementwiseOps, SelectAndClamp) {
  uint64_t seed = 400;
  for (DType t : all_dtypes()) {
    for (const auto& dims : test_shapes()) {
      SCOPED_TRACE(std::string(dtype_short_name(t)) + dims_str(dims));
      AbstractValue av{t, concrete_shape(dims)};
      AbstractValue pv{DType::kBool, concrete_shape(dims)};
      ir::Program sel = test::single_op_program(OpKind::kSelect, {pv, av, av});
      expect_matches_reference(sel, {test::random_buffer(DType::kBool, dims, seed), test::random_buffer(t, dims, seed + 1, 0, 100),
                                     test::random_buffer(t, dims, seed + 2, 0, 100)});
      if (t == DType::kBool) continue;
      ir::Program cl = test::single_op_program(OpKind::kClamp, {av, av, av});
      expect_matches_reference(cl, {test::random_buffer(t, dims, seed + 3, 0, 30), test::random_buffer(t, dims, seed + 4, 0, 100),
                                    test::random_buffer(t, dims, seed + 5, 60, 100)});
      seed += 6;
    }
  }
}

TEST(ElementwiseOps, ConvertAllPairs) {
  uint64_t seed = 500;
  for (DType from : all_dtypes()) {
    for (DType to : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_short_name(from)) + " -> " + std::string(dtype_short_name(to)));
      const std::vector<int64_t> dims = {5, 37};
      ir::Program p = test::single_op_program(OpKind::kConvert, {{from, concrete_shape(dims)}}, {{"dtype", to}});
      // Includes out-of-range values for narrow targets (saturation / wraparound) and fractions.
      const double lo = is_unsigned_integer(from) ? 0 : -300, hi = 300;
      expect_matches_reference(p, {test::random_buffer(from, dims, seed++, lo, hi)});
    }
  }
  // Specials into integers: NaN -> 0, +-inf saturate.
  Buffer x = test::buffer_from_doubles(DType::kFloat32, {4}, {NAN, INFINITY, -INFINITY, -2.7});
  for (DType to : int_dtypes()) {
    ir::Program p = test::single_op_program(OpKind::kConvert, {x.abstract_value()}, {{"dtype", to}});
    expect_matches_reference(p, {x});
  }
}

}  // namespace
}  // namespace mcx::cpu::testing
