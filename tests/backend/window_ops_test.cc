// conv_general_dilated and reduce_window kernels against the reference evaluator: every configuration of
// tests/support/window_cases.h over the floating dtypes (and the integer dtypes for reduce_window), both
// GEMM formulations of the convolution and its Winograd form, strided (transposed, reversed) operand
// views, panels larger than one GEMM, and results independent of the thread count.
#include <cmath>

#include "mcx/backend/cpu/view.h"
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"
#include "tests/support/window_cases.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using Ints = std::vector<int64_t>;

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

double conv_rtol(DType t) { return t == DType::kFloat32 ? 2e-5 : -1; }

// Every case in every floating dtype against the reference, with random operands from seed on.
void expect_cases_match_reference(const std::vector<test::ConvCase>& cases, uint64_t seed) {
  for (const test::ConvCase& c : cases) {
    for (DType t : float_dtypes()) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_short_name(t)));
      ir::Program p = test::single_op_program(OpKind::kConvGeneralDilated, {av(t, c.lhs), av(t, c.rhs)}, c.attrs());
      expect_matches_reference(p, {test::random_buffer(t, c.lhs, seed), test::random_buffer(t, c.rhs, seed + 1)},
                               conv_rtol(t), conv_rtol(t));
      seed += 2;
    }
  }
}

TEST(ConvKernel, MatchesReferenceForEveryCaseAndFloatDtype) { expect_cases_match_reference(test::conv_cases(), 1); }

TEST(ConvKernel, WinogradMatchesReference) { expect_cases_match_reference(test::winograd_conv_cases(), 100); }

// Operands that are views: a transposed lhs (non-unit feature stride) and a reversed rhs (negative
// strides), as the input gradient of a convolution produces; by im2col (3 channels) and by Winograd (16).
TEST(ConvKernel, ReadsTransposedAndReversedViews) {
  for (int64_t channels : {3, 16}) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(std::to_string(channels) + " channels, " + std::string(dtype_short_name(t)));
      const Ints xd{2, channels, 6, 5}, wd{3, 3, channels, 16};
      ir::ProgramBuilder b("views");
      ir::ValueId x = b.add_parameter(av(t, xd));  // NCHW, transposed to NHWC below
      ir::ValueId w = b.add_parameter(av(t, wd));  // HWIO
      ir::ValueId xt = b.transpose(x, {0, 2, 3, 1});
      ir::ValueId wr = b.emit_or_throw(OpKind::kReverse, {w}, {{"dimensions", Ints{0, 1}}});
      test::ConvCase c{"views", {}, {}, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 0},
                       {1, 1}};
      ir::ValueId y = b.emit_or_throw(OpKind::kConvGeneralDilated, {xt, wr}, c.attrs());
      ir::Program p = std::move(b).build({y});
      expect_matches_reference(p, {test::random_buffer(t, xd, 7), test::random_buffer(t, wd, 8)}, conv_rtol(t),
                               conv_rtol(t));
    }
  }
}

// One image larger than a GEMM panel (several row panels), and a batch smaller than the thread count.
TEST(ConvKernel, SeveralPanelsPerImage) {
  test::ConvCase c{"big", {1, 48, 48, 64}, {3, 3, 64, 2}, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2},
                   {1, 1},  {1, 1},          {1, 1},       {1, 1},       {1, 1}};
  ir::Program p = test::single_op_program(OpKind::kConvGeneralDilated, {av(DType::kFloat32, c.lhs),
                                                                        av(DType::kFloat32, c.rhs)}, c.attrs());
  expect_matches_reference(p, {test::random_buffer(DType::kFloat32, c.lhs, 9),
                               test::random_buffer(DType::kFloat32, c.rhs, 10)}, 1e-4, 1e-4);
}

// Both formulations split work at shape-determined boundaries: 1, 2 and 3 threads agree bitwise.
TEST(ConvKernel, ResultsDoNotDependOnTheThreadCount) {
  ThreadCountGuard guard;
  std::vector<test::ConvCase> cases = test::conv_cases();
  for (const test::ConvCase& c : test::winograd_conv_cases()) cases.push_back(c);
  for (const std::string name : {"nhwc_same", "grouped", "window_larger_than_output", "weight_grad_grouped",
                                 "winograd_same_odd_height"}) {
    for (const test::ConvCase& c : cases) {
      if (c.name != name) continue;
      ir::Program p = test::single_op_program(OpKind::kConvGeneralDilated,
                                              {av(DType::kFloat32, c.lhs), av(DType::kFloat32, c.rhs)}, c.attrs());
      std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, c.lhs, 11),
                                  test::random_buffer(DType::kFloat32, c.rhs, 12)};
      set_num_threads(1);
      std::vector<Buffer> one = run_cpu(p, args);
      for (int n : {2, 3}) {
        set_num_threads(n);
        std::vector<Buffer> many = run_cpu(p, args);
        ASSERT_EQ(many.size(), 1u);
        EXPECT_TRUE(many[0].bitwise_equal(one[0])) << name << " with " << n << " threads";
      }
    }
  }
}

TEST(ConvKernel, EmptyBatchGivesAnEmptyResult) {
  test::ConvCase c = test::conv_cases()[0];
  c.lhs[0] = 0;
  ir::Program p = test::single_op_program(OpKind::kConvGeneralDilated, {av(DType::kFloat32, c.lhs),
                                                                        av(DType::kFloat32, c.rhs)}, c.attrs());
  std::vector<Buffer> got = run_cpu(p, {Buffer::zeros(DType::kFloat32, c.lhs), Buffer::zeros(DType::kFloat32, c.rhs)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dims(), (Ints{0, 5, 6, 4}));
}

TEST(ReduceWindowKernel, MatchesReferenceForEveryCaseReductionAndDtype) {
  uint64_t seed = 20;
  for (const test::WindowCase& c : test::window_cases()) {
    for (DType t : all_dtypes()) {
      if (t == DType::kBool) continue;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        SCOPED_TRACE(c.name + " " + std::string(dtype_short_name(t)) + " " + std::string(reduce_op_name(op)));
        ir::Program p = test::single_op_program(OpKind::kReduceWindow, {av(t, c.dims)}, test::window_attrs(c, op));
        // Integer sums stay within int8 (the reference saturates where the kernel wraps).
        const double hi = is_integer(t) ? 5 : 20, lo = is_unsigned_integer(t) ? 0 : -hi;
        expect_matches_reference(p, {test::random_buffer(t, c.dims, seed++, lo, hi)});
      }
    }
  }
}

TEST(ReduceWindowKernel, MaxAndMinPropagateNaN) {
  Buffer x = test::buffer_from_doubles(DType::kFloat32, {1, 4, 1}, {1, NAN, 3, 4});
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    test::WindowCase c{"nan", {1, 4, 1}, {1, 2, 1}, {1, 2, 1}, {0, 0, 0}, {0, 0, 0}};
    ir::Program p = test::single_op_program(OpKind::kReduceWindow, {x.abstract_value()}, test::window_attrs(c, op));
    std::vector<Buffer> got = run_cpu(p, {x});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(std::isnan(got[0].data<float>()[0]));
    EXPECT_EQ(got[0].data<float>()[1], op == ReduceOp::kMax ? 4.0f : 3.0f);
  }
}

}  // namespace
}  // namespace mcx::cpu::testing
