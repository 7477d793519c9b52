// Program-level forward mode: jvp_program and linearize_programs on composite and symbolic programs,
// forward over forward, results without tangents, the split between primal and linear parts, errors.
// Every op's JVP rule is checked through check_vjp (tests/support/test_util.h), which every VJP test calls.
#include <string>

#include "gtest/gtest.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/passes.h"
#include "tests/ir/ir_test_util.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::ProgramBuilder;

ValueId matmul(ProgramBuilder& b, ValueId x, ValueId w) {
  return b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                         {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
}

TEST(Forward, CompositeProgramWithSharedValues) {
  // y = tanh(x w + b); out = (softmax-like exp(y) / sum(exp(y)), sum(y * y), y) with y used three times.
  ProgramBuilder b("net");
  ValueId x = b.add_parameter(f64({5, 4}));
  ValueId w = b.add_parameter(f64({4, 3}));
  ValueId bias = b.add_parameter(f64({3}));
  ValueId y = b.unary(OpKind::kTanh, b.binary(OpKind::kAdd, matmul(b, x, w), b.broadcast_in_dim(bias, concrete_shape({5, 3}), {1})));
  ValueId e = b.unary(OpKind::kExp, y);
  ValueId s = b.broadcast_in_dim(b.reduce_sum(e, {1}), concrete_shape({5, 3}), {0});
  Program f = std::move(b).build({b.binary(OpKind::kDiv, e, s), b.reduce_sum(b.binary(OpKind::kMul, y, y), {0, 1}), y});
  check_jvp(f, {rnd({5, 4}, 1), rnd({4, 3}, 2), rnd({3}, 3)}, {0, 1, 2}, 4);
  check_jvp(f, {rnd({5, 4}, 1), rnd({4, 3}, 2), rnd({3}, 3)}, {1}, 5);
}

TEST(Forward, ForwardOverForwardGivesSecondDerivatives) {
  // f(x) = x^3: jvp = 3 x^2 t; its jvp in x along s (t fixed) = 6 x t s.
  ProgramBuilder b("cube");
  ValueId x = b.add_parameter(f64({4}));
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, b.binary(OpKind::kMul, x, x))});
  auto j = ir::jvp_program(f, {0});
  ASSERT_TRUE(j.ok()) << j.status();
  auto jj = ir::jvp_program(*j, {0});  // params (x, t, s) -> (f, f_dot, d f, d f_dot)
  ASSERT_TRUE(jj.ok()) << jj.status();
  Buffer xv = rnd({4}, 1), t = rnd({4}, 2), s = rnd({4}, 3);
  auto out = reference_evaluate(*jj, std::vector<Buffer>{xv, t, s});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> want(4);
  for (int k = 0; k < 4; ++k) want[k] = 6 * xv.data<double>()[k] * t.data<double>()[k] * s.data<double>()[k];
  expect_buffers_near((*out)[3], Buffer::from_vector<double>(want, {4}), 1e-14, 1e-15);
  check_jvp(*j, {xv, t}, {0, 1}, 7);  // the jvp program's own JVP, against differences and its VJP
}

TEST(Forward, ResultsWithoutATangentGetZerosOfTheirType) {
  ProgramBuilder b("mixed");
  ValueId x = b.add_parameter(f64({3}));
  ValueId c = b.add_parameter(f64({3}));  // not differentiated
  ValueId as_int = b.convert(x, DType::kInt32);
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, c), as_int, b.unary(OpKind::kExp, c),
                                  b.unary(OpKind::kFloor, x)});
  auto j = ir::jvp_program(f, {0});
  ASSERT_TRUE(j.ok()) << j.status();
  Buffer xv = rnd({3}, 1, 0.1, 0.9), cv = rnd({3}, 2), t = rnd({3}, 3);
  auto out = reference_evaluate(*j, std::vector<Buffer>{xv, cv, t});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[5].bitwise_equal(Buffer::zeros(DType::kInt32, {3})));    // integer result
  EXPECT_TRUE((*out)[6].bitwise_equal(Buffer::zeros(DType::kFloat64, {3})));  // does not read x
  EXPECT_TRUE((*out)[7].bitwise_equal(Buffer::zeros(DType::kFloat64, {3})));  // floor: zero derivative
  check_jvp(f, {xv, cv}, {0}, 4);
}

TEST(Forward, LinearPartReadsResidualsNotTheNonlinearOps) {
  // f(x) = sin(x) * x + exp(x): the linear part multiplies tangents by saved values only.
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(f64({6}));
  Program f = std::move(b).build(
      {b.binary(OpKind::kAdd, b.binary(OpKind::kMul, b.unary(OpKind::kSin, x), x), b.unary(OpKind::kExp, x))});
  auto lin = ir::linearize_programs(f, {0});
  ASSERT_TRUE(lin.ok()) << lin.status();
  for (OpKind k : {OpKind::kSin, OpKind::kCos, OpKind::kExp}) {
    EXPECT_EQ(count_ops(lin->linear, k), 0) << ir::op_name(k);
  }
  EXPECT_EQ(count_ops(lin->primal, OpKind::kSin), 1);
  EXPECT_GE(lin->num_residuals, 2);
  EXPECT_EQ(lin->linear.num_params(), lin->num_residuals + 1);
  check_jvp(f, {rnd({6}, 1)}, {0}, 2);
}

TEST(Forward, SymbolicShapesDifferentiate) {
  auto scope = SymbolicScope::create({});
  ASSERT_TRUE(scope.ok());
  ProgramBuilder b("sym", *scope);
  Shape bx = symbolic_shape("b, 4");
  ValueId x = b.add_parameter(AbstractValue{DType::kFloat64, bx});
  ValueId w = b.add_parameter(f64({4, 3}));
  ValueId h = b.unary(OpKind::kTanh, matmul(b, x, w));
  ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {h}, {{"dimensions", V{0}}});
  Program f = std::move(b).build({b.reduce_sum(b.binary(OpKind::kMul, mx, mx), {0}), h});
  auto j = ir::jvp_program(f, {0, 1});
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(ir::verify(*j).ok()) << ir::verify(*j);
  EXPECT_EQ(j->type(j->results[3]), (AbstractValue{DType::kFloat64, symbolic_shape("b, 3")}));
  for (int64_t bv : {5, 2}) {
    SCOPED_TRACE(bv);
    auto fc = ir::specialize(f, {{"b", bv}});
    auto jc = ir::specialize(*j, {{"b", bv}});
    ASSERT_TRUE(fc.ok() && jc.ok());
    std::vector<Buffer> args = {rnd({bv, 4}, 1), rnd({4, 3}, 2)};
    check_jvp(*fc, args, {0, 1}, 3);
    auto want = ir::jvp_program(*fc, {0, 1});
    ASSERT_TRUE(want.ok());
    std::vector<Buffer> jargs = args;
    jargs.push_back(rnd({bv, 4}, 4));
    jargs.push_back(rnd({4, 3}, 5));
    auto got = reference_evaluate(*jc, jargs);
    auto expected = reference_evaluate(*want, jargs);
    ASSERT_TRUE(got.ok() && expected.ok());
    for (size_t r = 0; r < got->size(); ++r) expect_buffers_near((*got)[r], (*expected)[r], 1e-14, 1e-15);
  }
}

TEST(Forward, BadWrtIsInvalidArgument) {
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(f64({2}));
  ValueId i = b.add_parameter(AbstractValue{DType::kInt32, concrete_shape({2})});
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, b.convert(i, DType::kFloat64))});
  for (const std::vector<int>& wrt : {std::vector<int>{1}, std::vector<int>{2}, std::vector<int>{0, 0}}) {
    auto j = ir::jvp_program(f, wrt);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(j.status().message()).find("[jvp_program]"), std::string::npos) << j.status();
    EXPECT_FALSE(ir::linearize_programs(f, wrt).ok());
  }
  EXPECT_NE(std::string(ir::jvp_program(f, {0, 0}).status().message()).find("appears twice"), std::string::npos);
  EXPECT_NE(std::string(ir::jvp_program(f, {1}).status().message()).find("i32[2]"), std::string::npos);
}

}  // namespace
}  // namespace mcx::test
