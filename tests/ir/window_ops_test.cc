// conv_general_dilated and reduce_window in the IR: shape rules on concrete and symbolic dims, the
// verifier's errors, the text form, and the VJP rules against central finite differences (float64,
// through the reference evaluator).
#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"
#include "mcx/ir/window_rules.h"
#include "tests/ir/ir_test_programs.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"
#include "tests/support/window_cases.h"

namespace mcx::ir {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;
using test::ConvCase;
using test::WindowCase;

AbstractValue T(std::string_view text) { return value_or_throw(parse_abstract_value(text)); }

std::string infer_str(OpKind k, std::vector<std::string> types, const Attrs& attrs,
                      const SymbolicScope& scope = {}) {
  std::vector<AbstractValue> ops;
  for (const auto& t : types) ops.push_back(T(t));
  auto v = infer_type(k, ops, attrs, scope);
  return v.ok() ? v->to_string() : std::string(v.status().message());
}

ConvConfig nhwc(Ints strides, std::string low, std::string high, int64_t groups = 1) {
  ConvConfig c;
  c.lhs_spec = {0, 3, 1, 2};
  c.rhs_spec = {3, 2, 0, 1};
  c.out_spec = {0, 3, 1, 2};
  c.window_strides = std::move(strides);
  c.lhs_dilation = {1, 1};
  c.rhs_dilation = {1, 1};
  c.padding_low = symbolic_shape(low);
  c.padding_high = symbolic_shape(high);
  c.feature_group_count = groups;
  return c;
}

Attrs pool(int64_t reduce, Ints window, Ints strides, std::string low, std::string high) {
  ReduceWindowConfig c;
  c.reduce = static_cast<ReduceOp>(reduce);
  c.window_dimensions = std::move(window);
  c.window_strides = std::move(strides);
  c.padding_low = symbolic_shape(low);
  c.padding_high = symbolic_shape(high);
  return reduce_window_attrs(c);
}

TEST(WindowShapeRules, ConvOnSymbolicBatchAndSpatialDims) {
  const OpKind k = OpKind::kConvGeneralDilated;
  EXPECT_EQ(infer_str(k, {"f32[b,28,28,32]", "f32[3,3,32,64]"}, conv_attrs(nhwc({1, 1}, "1, 1", "1, 1"))),
            "f32[b,28,28,64]");
  EXPECT_EQ(infer_str(k, {"f32[b,28,28,32]", "f32[3,3,32,64]"}, conv_attrs(nhwc({2, 2}, "0, 0", "1, 1"))),
            "f32[b,14,14,64]");
  EXPECT_EQ(infer_str(k, {"bf16[b,h,w,4]", "bf16[3,3,2,6]"}, conv_attrs(nhwc({1, 1}, "1, 1", "1, 1", 2))),
            "bf16[b,h,w,6]");
  // A symbolic spatial dim must be known to hold the window: decided under the scope's constraints.
  const SymbolicScope h3 = value_or_throw(SymbolicScope::create({"h >= 3"}));
  EXPECT_EQ(infer_str(k, {"f32[b,h,8,4]", "f32[3,3,4,2]"}, conv_attrs(nhwc({2, 1}, "0, 0", "0, 0")), h3),
            "f32[b,(h - 3) // 2 + 1,6,2]");
  EXPECT_THAT(infer_str(k, {"f32[b,h,8,4]", "f32[3,3,4,2]"}, conv_attrs(nhwc({2, 1}, "0, 0", "0, 0"))),
              HasSubstr("[conv_general_dilated] spatial dim 0 (lhs f32[b,h,8,4], rhs f32[3,3,4,2]): padded size >= "
                        "window: inconclusive dimension comparison: h >= 3"));
  ConvConfig dilated = nhwc({1, 1}, "0, 0", "0, 0");
  dilated.lhs_dilation = {2, 1};
  dilated.rhs_dilation = {1, 3};
  EXPECT_EQ(infer_str(k, {"f64[2,4,9,1]", "f64[2,2,1,3]"}, conv_attrs(dilated)), "f64[2,6,6,3]");
  for (const ConvCase& c : test::conv_cases()) {
    std::vector<AbstractValue> ops{{DType::kFloat64, concrete_shape(c.lhs)}, {DType::kFloat64, concrete_shape(c.rhs)}};
    EXPECT_TRUE(infer_type(k, ops, c.attrs(), {}).ok()) << c.name << ": " << infer_type(k, ops, c.attrs(), {}).status();
  }
}

TEST(WindowShapeRules, ConvErrorsSayWhatWasExpected) {
  const OpKind k = OpKind::kConvGeneralDilated;
  const Attrs a = conv_attrs(nhwc({1, 1}, "0, 0", "0, 0"));
  EXPECT_EQ(infer_str(k, {"f32[2,5,5,3]", "f64[3,3,3,4]"}, a),
            "[conv_general_dilated] expected operands of one dtype, found lhs f32[2,5,5,3] and rhs f64[3,3,3,4]");
  EXPECT_EQ(infer_str(k, {"i32[2,5,5,3]", "i32[3,3,3,4]"}, a),
            "[conv_general_dilated] expected floating operands, found i32[2,5,5,3]");
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3]"}, a),
              HasSubstr("expected lhs and rhs of one rank >= 2 (batch, feature and spatial dims), found lhs"));
  EXPECT_EQ(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,2,4]"}, a),
            "[conv_general_dilated] expected lhs f32[2,5,5,3] feature dim 3 to be rhs f32[3,3,2,4] input-feature dim "
            "2 (2) times feature_group_count 1, found 3");
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,4]", "f32[3,3,2,5]"}, conv_attrs(nhwc({1, 1}, "0, 0", "0, 0", 2))),
              HasSubstr("expected rhs f32[3,3,2,5] output-feature dim 3 to be divisible by feature_group_count 2, "
                        "found 5"));
  EXPECT_THAT(infer_str(k, {"f32[2,2,5,3]", "f32[3,3,3,4]"}, a),
              HasSubstr("spatial dim 0 (lhs f32[2,2,5,3], rhs f32[3,3,3,4]): expected the padded size to be at "
                        "least the window 3, found 2"));
  ConvConfig bad = nhwc({0, 1}, "0, 0", "0, 0");
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, conv_attrs(bad)),
              HasSubstr("[conv_general_dilated] expected 'window_strides' entries >= 1, found [0,1]"));
  bad = nhwc({1, 1}, "0", "0, 0");
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, conv_attrs(bad)),
              HasSubstr("[conv_general_dilated] expected 2 entries in 'padding_low', found 1"));
  bad = nhwc({1, 1}, "0, 0", "0, 0");
  bad.lhs_spec = {0, 0, 1, 2};
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, conv_attrs(bad)),
              HasSubstr("expected 'lhs_spec' to be a permutation of the 4 operand dims, found [0,0,1,2]"));
  bad = nhwc({1, 1}, "0, 0", "0, 0", 0);
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, conv_attrs(bad)),
              HasSubstr("expected feature_group_count >= 1, found 0"));
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, Attrs{}),
              HasSubstr("[conv_general_dilated] missing attribute 'lhs_spec'"));
  Attrs extra = a;
  extra.set("bogus", int64_t{1});
  EXPECT_THAT(infer_str(k, {"f32[2,5,5,3]", "f32[3,3,3,4]"}, extra),
              HasSubstr("[conv_general_dilated] unexpected attribute 'bogus'"));
}

TEST(WindowShapeRules, ReduceWindow) {
  const OpKind k = OpKind::kReduceWindow;
  EXPECT_EQ(infer_str(k, {"f32[b,28,28,32]"}, pool(1, {1, 2, 2, 1}, {1, 2, 2, 1}, "0,0,0,0", "0,0,0,0")),
            "f32[b,14,14,32]");
  EXPECT_EQ(infer_str(k, {"i32[b,5,6]"}, pool(0, {1, 3, 3}, {1, 2, 1}, "0,1,1", "0,1,1")), "i32[b,3,6]");
  EXPECT_EQ(infer_str(k, {"f16[4,7]"}, pool(2, {2, 3}, {2, 2}, "0,0", "0,0")), "f16[2,3]");
  EXPECT_EQ(infer_str(k, {"f32[4]"}, pool(3, {2}, {1}, "0", "0")),
            "[reduce_window] expected 'reduce' 0 (sum), 1 (max) or 2 (min), found 3");
  EXPECT_EQ(infer_str(k, {"bool[4]"}, pool(1, {2}, {1}, "0", "0")),
            "[reduce_window] expected a numeric operand, found bool[4]");
  EXPECT_EQ(infer_str(k, {"f32[4]"}, pool(1, {2}, {1}, "-1", "0")), "[reduce_window] expected paddings >= 0, found [-1]");
  EXPECT_EQ(infer_str(k, {"f32[4,4]"}, pool(1, {2}, {1}, "0", "0")),
            "[reduce_window] expected 2 entries in 'window_dimensions', found 1");
  EXPECT_THAT(infer_str(k, {"f32[4,3]"}, pool(1, {2, 5}, {1, 1}, "0,0", "0,1")),
              HasSubstr("dim 1 of f32[4,3]: expected the padded size to be at least the window 5, found 4"));
}

TEST(WindowVerify, RecordedTypeMustMatchAndOpsetIsThree) {
  Program p = testing_programs::window_ops_program();
  EXPECT_TRUE(verify(p).ok()) << verify(p);
  EXPECT_EQ(required_opset(p), 3);
  Program bad = p;
  bad.instrs[0].type = T("f32[b,4,13,5]");
  EXPECT_THAT(std::string(verify(bad).message()),
              HasSubstr("[verify] instruction 0 (%4 = conv_general_dilated): recorded type f32[b,4,13,5] differs "
                        "from inferred type f32[b,4,13,6]"));
  bad = p;
  bad.instrs[2].attrs.set("window_strides", Ints{1, 0, 2, 1});
  EXPECT_THAT(std::string(verify(bad).message()),
              HasSubstr("instruction 2 (%6 = reduce_window): [reduce_window] expected 'window_strides' entries >= 1"));
}

TEST(WindowText, RoundTripsWithSymbolicAndNegativePaddings) {
  Program p = testing_programs::window_ops_program();
  const std::string text = print_program(p);
  EXPECT_THAT(text, HasSubstr("= conv_general_dilated(%0, %1) {feature_group_count=2, lhs_dilation=[1, 2], "
                              "lhs_spec=[0, 3, 1, 2], out_spec=[0, 3, 1, 2], padding_high=dims[2,-1], "
                              "padding_low=dims[1,0], rhs_dilation=[2, 1], rhs_spec=[3, 2, 0, 1], "
                              "window_strides=[2, 1]} : f32[b,4,13,6]"));
  EXPECT_THAT(text, HasSubstr("= reduce_window(%0) {padding_high=dims[0,1,1,0], padding_low=dims[0,1,0,0], "
                              "reduce=1, window_dimensions=[1, 3, 2, 1], window_strides=[1, 2, 2, 1]} : f32[b,5,4,4]"));
  Program parsed = value_or_throw(parse_program(text));
  EXPECT_EQ(print_program(parsed), text);
  EXPECT_TRUE(structurally_equal(parsed, p));
  EXPECT_EQ(fingerprint_hex(parsed), fingerprint_hex(p));
}

// ---- VJPs against central differences (float64) --------------------------------------------------------

AbstractValue f64(const Ints& dims) { return {DType::kFloat64, concrete_shape(dims)}; }

class ConvVjp : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvVjp, BothOperandsMatchFiniteDifferences) {
  const ConvCase c = GetParam();
  Program f = test::single_op_program(OpKind::kConvGeneralDilated, {f64(c.lhs), f64(c.rhs)}, c.attrs());
  test::check_vjp(f, {test::random_buffer(DType::kFloat64, c.lhs, 1), test::random_buffer(DType::kFloat64, c.rhs, 2)},
                  {0, 1}, 3, 1e-6, 1e-8);
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvVjp, ::testing::ValuesIn(test::conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& i) { return i.param.name; });

class WindowVjp : public ::testing::TestWithParam<WindowCase> {};

TEST_P(WindowVjp, SumMaxMinMatchFiniteDifferences) {
  const WindowCase c = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    SCOPED_TRACE(reduce_op_name(op));
    Program f = test::single_op_program(OpKind::kReduceWindow, {f64(c.dims)}, test::window_attrs(c, op));
    // Distinct random values: no ties, so the extreme of each window is unique and differentiable.
    test::check_vjp(f, {test::random_buffer(DType::kFloat64, c.dims, 5, -3, 3)}, {0}, 6, 1e-6, 1e-8);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, WindowVjp, ::testing::ValuesIn(test::window_cases()),
                         [](const ::testing::TestParamInfo<WindowCase>& i) { return i.param.name; });

// Select and scatter: on ties the whole cotangent of a window goes to its first maximal element, and an
// element in several windows collects the cotangent of each window it wins.
TEST(WindowVjp, MaxTiesGoToTheFirstElementOfEachWindow) {
  for (bool tiled : {true, false}) {
    const Ints stride = tiled ? Ints{2} : Ints{1};
    Program f = test::single_op_program(OpKind::kReduceWindow, {f64({6})},
                                        pool(1, {2}, stride, "0", "0"));
    Program vjp = value_or_throw(vjp_program(f, {0}));
    Buffer x = Buffer::from_vector<double>({3, 3, 1, 5, 5, 5}, {6});
    const int64_t windows = tiled ? 3 : 5;
    Buffer ct = test::buffer_from_doubles(DType::kFloat64, {windows}, tiled ? std::vector<double>{1, 10, 100}
                                                                            : std::vector<double>{1, 10, 100, 1000, 1e4});
    std::vector<Buffer> out = value_or_throw(test::reference_evaluate(vjp, std::vector<Buffer>{x, ct}));
    // tiled windows {3,3} {1,5} {5,5}; sliding windows {3,3} {3,1} {1,5} {5,5} {5,5}.
    const std::vector<double> want = tiled ? std::vector<double>{1, 0, 0, 10, 100, 0}
                                           : std::vector<double>{1, 10, 0, 1100, 1e4, 0};
    EXPECT_EQ(out[1].to_doubles(), want) << (tiled ? "tiled" : "sliding");
  }
}

// The gradient program of a symbolic-batch convolution and pooling verifies and keeps the batch symbolic.
TEST(WindowVjp, SymbolicBatchDifferentiates) {
  Program p = testing_programs::window_ops_program();
  Program vjp = value_or_throw(vjp_program(p, {0, 1, 2, 3}));
  EXPECT_TRUE(verify(vjp).ok()) << verify(vjp);
  EXPECT_EQ(vjp.type(vjp.results[p.results.size()]).to_string(), "f32[b,9,8,4]");
  EXPECT_EQ(vjp.type(vjp.results[p.results.size() + 1]).to_string(), "f32[3,2,2,6]");
}

}  // namespace
}  // namespace mcx::ir
