#include "mcx/ir/shape_rules.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"

namespace mcx::ir {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

AbstractValue T(std::string_view text) { return value_or_throw(parse_abstract_value(text)); }
Shape S(std::string_view text) { return symbolic_shape(text); }

absl::StatusOr<AbstractValue> infer(OpKind k, std::vector<std::string> types, Attrs attrs = {},
                                    const SymbolicScope& scope = {}) {
  std::vector<AbstractValue> ops;
  for (const auto& t : types) ops.push_back(T(t));
  return infer_type(k, ops, attrs, scope);
}

std::string ok_type(absl::StatusOr<AbstractValue> v) {
  if (!v.ok()) return "ERROR: " + std::string(v.status().message());
  return v->to_string();
}
std::string err(absl::StatusOr<AbstractValue> v) {
  if (v.ok()) return "OK: " + v->to_string();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST(ShapeRules, ElementwiseUnary) {
  for (OpKind k : {OpKind::kExp, OpKind::kLog, OpKind::kTanh, OpKind::kSqrt, OpKind::kRsqrt, OpKind::kFloor,
                   OpKind::kSin, OpKind::kLogistic, OpKind::kRound}) {
    EXPECT_EQ(ok_type(infer(k, {"f32[b,3]"})), "f32[b,3]") << op_name(k);
    EXPECT_THAT(err(infer(k, {"i32[3]"})), HasSubstr("must be floating, found i32[3]")) << op_name(k);
    EXPECT_THAT(err(infer(k, {"i32[3]"})), testing::StartsWith(std::string("[") + std::string(op_name(k)) + "]"));
  }
  EXPECT_EQ(ok_type(infer(OpKind::kNeg, {"i8[2]"})), "i8[2]");
  EXPECT_THAT(err(infer(OpKind::kNeg, {"bool[2]"})), HasSubstr("[neg] operand must be numeric"));
  EXPECT_EQ(ok_type(infer(OpKind::kNot, {"bool[2]"})), "bool[2]");
  EXPECT_EQ(ok_type(infer(OpKind::kNot, {"u32[2]"})), "u32[2]");
  EXPECT_THAT(err(infer(OpKind::kNot, {"f32[2]"})), HasSubstr("[not] operand must be bool or integer"));
  EXPECT_EQ(ok_type(infer(OpKind::kIsFinite, {"f16[b]"})), "bool[b]");
  EXPECT_THAT(err(infer(OpKind::kIsFinite, {"i32[]"})), HasSubstr("[is_finite]"));
  EXPECT_EQ(ok_type(infer(OpKind::kStopGradient, {"u8[4]"})), "u8[4]");
  EXPECT_EQ(ok_type(infer(OpKind::kConvert, {"f32[b,2]"}, {{"dtype", DType::kBFloat16}})), "bf16[b,2]");
  EXPECT_THAT(err(infer(OpKind::kConvert, {"f32[2]"})), HasSubstr("[convert] missing attribute 'dtype'"));
  EXPECT_THAT(err(infer(OpKind::kConvert, {"f32[2]"}, {{"dtype", int64_t{3}}})),
              HasSubstr("[convert] attribute 'dtype' expected dtype, found int"));
}

TEST(ShapeRules, ElementwiseBinaryAndCompare) {
  EXPECT_EQ(ok_type(infer(OpKind::kAdd, {"f32[b,4]", "f32[b,4]"})), "f32[b,4]");
  EXPECT_EQ(err(infer(OpKind::kAdd, {"f32[3,4]", "f32[3,5]"})), "[add] operand shapes differ: f32[3,4] vs f32[3,5]");
  EXPECT_EQ(err(infer(OpKind::kMul, {"f32[3]", "f64[3]"})), "[mul] operand dtypes differ: f32[3] vs f64[3]");
  EXPECT_THAT(err(infer(OpKind::kAdd, {"f32[b]", "f32[c]"})), HasSubstr("operand shapes differ: f32[b] vs f32[c]"));
  EXPECT_THAT(err(infer(OpKind::kAdd, {"bool[2]", "bool[2]"})), HasSubstr("[add] operands must be numeric"));
  EXPECT_EQ(ok_type(infer(OpKind::kAnd, {"bool[2]", "bool[2]"})), "bool[2]");
  EXPECT_EQ(ok_type(infer(OpKind::kXor, {"i32[2]", "i32[2]"})), "i32[2]");
  EXPECT_THAT(err(infer(OpKind::kOr, {"f32[2]", "f32[2]"})), HasSubstr("[or] operands must be bool or integer"));
  EXPECT_EQ(ok_type(infer(OpKind::kLt, {"f32[b]", "f32[b]"})), "bool[b]");
  EXPECT_EQ(ok_type(infer(OpKind::kEq, {"bool[]", "bool[]"})), "bool[]");
  EXPECT_THAT(err(infer(OpKind::kAdd, {"f32[2]"})), HasSubstr("[add] expects 2 operands, got 1"));
  EXPECT_THAT(err(infer(OpKind::kAdd, {"f32[2]", "f32[2]"}, {{"dimension", int64_t{0}}})),
              HasSubstr("[add] unexpected attribute 'dimension' (takes none)"));
  // Symbolic equality decided on the normal form.
  EXPECT_EQ(ok_type(infer(OpKind::kSub, {"f32[2*b + 1]", "f32[1 + b + b]"})), "f32[2*b + 1]");
}

TEST(ShapeRules, Ternary) {
  EXPECT_EQ(ok_type(infer(OpKind::kSelect, {"bool[b]", "f32[b]", "f32[b]"})), "f32[b]");
  EXPECT_THAT(err(infer(OpKind::kSelect, {"i32[b]", "f32[b]", "f32[b]"})),
              HasSubstr("[select] predicate must be bool, found i32[b]"));
  EXPECT_THAT(err(infer(OpKind::kSelect, {"bool[2]", "f32[3]", "f32[3]"})), HasSubstr("operand shapes differ"));
  EXPECT_THAT(err(infer(OpKind::kSelect, {"bool[3]", "f32[3]", "f16[3]"})), HasSubstr("operand dtypes differ"));
  EXPECT_EQ(ok_type(infer(OpKind::kClamp, {"i32[4]", "i32[4]", "i32[4]"})), "i32[4]");
  EXPECT_THAT(err(infer(OpKind::kClamp, {"i32[4]", "i32[5]", "i32[4]"})), HasSubstr("[clamp] operand shapes differ"));
}

TEST(ShapeRules, NullaryOps) {
  Buffer b = Buffer::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(ok_type(infer(OpKind::kConstant, {}, {{"value", b}})), "i32[2,3]");
  EXPECT_THAT(err(infer(OpKind::kConstant, {})), HasSubstr("[constant] missing attribute 'value'"));
  EXPECT_EQ(ok_type(infer(OpKind::kIota, {},
                          {{"dtype", DType::kInt32}, {"shape", S("b, 4")}, {"dimension", int64_t{1}}})),
            "i32[b,4]");
  EXPECT_THAT(err(infer(OpKind::kIota, {}, {{"dtype", DType::kInt32}, {"shape", S("4")}, {"dimension", int64_t{1}}})),
              HasSubstr("[iota] attribute 'dimension' is 1"));
  EXPECT_THAT(err(infer(OpKind::kIota, {}, {{"dtype", DType::kBool}, {"shape", S("4")}, {"dimension", int64_t{0}}})),
              HasSubstr("[iota] dtype must be numeric"));
  EXPECT_THAT(err(infer(OpKind::kConstant, {"f32[]"}, {{"value", b}})), HasSubstr("[constant] expects 0 operands"));
}

TEST(ShapeRules, BroadcastReshapeTranspose) {
  Attrs bc{{"shape", S("b, 3, 4")}, {"broadcast_dimensions", Ints{1, 2}}};
  EXPECT_EQ(ok_type(infer(OpKind::kBroadcastInDim, {"f32[3,1]"}, bc)), "f32[b,3,4]");
  EXPECT_EQ(ok_type(infer(OpKind::kBroadcastInDim, {"f32[3,4]"}, bc)), "f32[b,3,4]");
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[3,5]"}, bc)),
              HasSubstr("[broadcast_in_dim] operand f32[3,5] dim 1 is 5, expected 1 or result f32[b,3,4] dim 2"));
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[3]"}, bc)), HasSubstr("expected the operand rank 1"));
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[3,4]"},
                        {{"shape", S("3, 4")}, {"broadcast_dimensions", Ints{1, 0}}})),
              HasSubstr("strictly increasing"));
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[3]"}, {{"shape", S("3")}, {"broadcast_dimensions", Ints{1}}})),
              HasSubstr("entry 0 is 1, out of range"));
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[]"}, {{"shape", S("-1")}, {"broadcast_dimensions", Ints{}}})),
              HasSubstr("expected >= 0"));

  EXPECT_EQ(ok_type(infer(OpKind::kReshape, {"f32[b,784]"}, {{"shape", S("b, 28, 28")}})), "f32[b,28,28]");
  EXPECT_EQ(ok_type(infer(OpKind::kReshape, {"f32[b,c]"}, {{"shape", S("c*b")}})), "f32[b*c]");
  EXPECT_THAT(err(infer(OpKind::kReshape, {"f32[3,4]"}, {{"shape", S("5, 2")}})),
              HasSubstr("[reshape] element counts differ: operand f32[3,4] has 12, shape [5,2] has 10"));

  EXPECT_EQ(ok_type(infer(OpKind::kTranspose, {"f32[b,3,4]"}, {{"permutation", Ints{2, 0, 1}}})), "f32[4,b,3]");
  EXPECT_THAT(err(infer(OpKind::kTranspose, {"f32[b,3]"}, {{"permutation", Ints{0, 0}}})), HasSubstr("repeats axis 0"));
  EXPECT_THAT(err(infer(OpKind::kTranspose, {"f32[b,3]"}, {{"permutation", Ints{0}}})),
              HasSubstr("expected rank 2"));
  EXPECT_THAT(err(infer(OpKind::kTranspose, {"f32[b,3]"}, {{"permutation", Ints{0, 2}}})),
              HasSubstr("entry 1 is 2, expected an axis in [0, 2)"));
}

TEST(ShapeRules, Slice) {
  Attrs a{{"start", S("1, 0")}, {"limit", S("3, b")}, {"strides", Ints{1, 2}}};
  EXPECT_EQ(ok_type(infer(OpKind::kSlice, {"f32[4,b]"}, a)), "f32[2,(b + 1) // 2]");
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[2,b]"}, a)), HasSubstr("[slice] dim 0: limit 3 exceeds operand f32[2,b]"));
  Attrs bad{{"start", S("3")}, {"limit", S("1")}, {"strides", Ints{1}}};
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4]"}, bad)), HasSubstr("limit 1 is less than start 3"));
  Attrs neg{{"start", S("-1")}, {"limit", S("1")}, {"strides", Ints{1}}};
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4]"}, neg)), HasSubstr("start 0 is -1, expected >= 0"));
  Attrs zero_stride{{"start", S("0")}, {"limit", S("1")}, {"strides", Ints{0}}};
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4]"}, zero_stride)), HasSubstr("stride 0 is 0, expected >= 1"));
  // Symbolic bounds: needs the scope to decide b >= 16.
  Attrs sym{{"start", S("0")}, {"limit", S("16")}, {"strides", Ints{1}}};
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[b]"}, sym)),
              HasSubstr("[slice] dim 0: limit 16 <= operand f32[b] dim 0: inconclusive dimension comparison"));
  SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 16"}));
  EXPECT_EQ(ok_type(infer(OpKind::kSlice, {"f32[b]"}, sym, scope)), "f32[16]");
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4]"}, {{"start", S("0")}, {"limit", S("1")}})),
              HasSubstr("[slice] missing attribute 'strides'"));
}

TEST(ShapeRules, DynamicSlices) {
  EXPECT_EQ(ok_type(infer(OpKind::kDynamicSlice, {"f32[b,8]", "i32[]", "i32[]"}, {{"sizes", S("1, 4")}})),
            "f32[1,4]");
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {"f32[b,8]", "i32[]"}, {{"sizes", S("1, 4")}})),
              HasSubstr("[dynamic_slice] expects 1 + 2 operands"));
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {"f32[8]", "f32[]"}, {{"sizes", S("4")}})),
              HasSubstr("start index operand 1 must be an integer scalar, found f32[]"));
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {"f32[8]", "i32[]"}, {{"sizes", S("9")}})),
              HasSubstr("size 0 is 9, larger than operand f32[8]"));
  EXPECT_EQ(ok_type(infer(OpKind::kDynamicUpdateSlice, {"f32[8,b]", "f32[2,b]", "i64[]", "i64[]"})), "f32[8,b]");
  EXPECT_THAT(err(infer(OpKind::kDynamicUpdateSlice, {"f32[8]", "f32[9]", "i32[]"})),
              HasSubstr("update f32[9] dim 0 exceeds operand f32[8]"));
  EXPECT_THAT(err(infer(OpKind::kDynamicUpdateSlice, {"f32[8]", "f16[2]", "i32[]"})), HasSubstr("rank and dtype"));
  EXPECT_THAT(err(infer(OpKind::kDynamicUpdateSlice, {"f32[8]", "f32[2]"})), HasSubstr("expects 2 + 1 operands"));
}

TEST(ShapeRules, ConcatenatePadReverse) {
  EXPECT_EQ(ok_type(infer(OpKind::kConcatenate, {"f32[b,2]", "f32[b,3]", "f32[b,c]"}, {{"dimension", int64_t{1}}})),
            "f32[b,c + 5]");
  EXPECT_THAT(err(infer(OpKind::kConcatenate, {"f32[b,2]", "f32[c,3]"}, {{"dimension", int64_t{1}}})),
              HasSubstr("operand shapes differ outside dimension 1"));
  EXPECT_THAT(err(infer(OpKind::kConcatenate, {"f32[2]", "i32[3]"}, {{"dimension", int64_t{0}}})),
              HasSubstr("operand dtypes differ"));
  EXPECT_THAT(err(infer(OpKind::kConcatenate, {}, {{"dimension", int64_t{0}}})), HasSubstr("at least one operand"));
  EXPECT_THAT(err(infer(OpKind::kConcatenate, {"f32[2]"}, {{"dimension", int64_t{1}}})),
              HasSubstr("attribute 'dimension' is 1"));

  Attrs pad{{"low", S("1, -1")}, {"high", S("2, b")}, {"interior", Ints{1, 0}}};
  EXPECT_EQ(ok_type(infer(OpKind::kPad, {"f32[3,4]", "f32[]"}, pad)), "f32[8,b + 3]");
  Attrs sym_interior{{"low", S("0")}, {"high", S("0")}, {"interior", Ints{2}}};
  EXPECT_EQ(ok_type(infer(OpKind::kPad, {"f32[b]", "f32[]"}, sym_interior)), "f32[3*b - 2]");
  EXPECT_THAT(err(infer(OpKind::kPad, {"f32[3]", "f64[]"}, sym_interior)), HasSubstr("padding value must be a scalar"));
  Attrs too_neg{{"low", S("-3")}, {"high", S("-1")}, {"interior", Ints{0}}};
  EXPECT_THAT(err(infer(OpKind::kPad, {"f32[3]", "f32[]"}, too_neg)), HasSubstr("dim 0 of the result is -1"));
  Attrs neg_interior{{"low", S("0")}, {"high", S("0")}, {"interior", Ints{-1}}};
  EXPECT_THAT(err(infer(OpKind::kPad, {"f32[3]", "f32[]"}, neg_interior)), HasSubstr("interior 0 is -1"));

  EXPECT_EQ(ok_type(infer(OpKind::kReverse, {"f32[b,2]"}, {{"dimensions", Ints{0, 1}}})), "f32[b,2]");
  EXPECT_THAT(err(infer(OpKind::kReverse, {"f32[b,2]"}, {{"dimensions", Ints{2}}})), HasSubstr("[reverse]"));
}

TEST(ShapeRules, Reductions) {
  EXPECT_EQ(ok_type(infer(OpKind::kReduceSum, {"f32[b,3,4]"}, {{"dimensions", Ints{0, 2}}})), "f32[3]");
  EXPECT_EQ(ok_type(infer(OpKind::kReduceMax, {"bool[b]"}, {{"dimensions", Ints{0}}})), "bool[]");
  EXPECT_THAT(err(infer(OpKind::kReduceSum, {"f32[2,3]"}, {{"dimensions", Ints{1, 0}}})), HasSubstr("must be sorted"));
  EXPECT_THAT(err(infer(OpKind::kReduceProd, {"f32[2,3]"}, {{"dimensions", Ints{1, 1}}})), HasSubstr("repeats axis 1"));
  EXPECT_THAT(err(infer(OpKind::kReduceSum, {"bool[2]"}, {{"dimensions", Ints{0}}})), HasSubstr("must be numeric"));
  EXPECT_EQ(ok_type(infer(OpKind::kArgMax, {"f32[b,10]"}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}})),
            "i32[b]");
  EXPECT_THAT(err(infer(OpKind::kArgMin, {"f32[b,10]"}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kFloat32}})),
              HasSubstr("[argmin] index_dtype must be an integer dtype, found f32"));
  EXPECT_EQ(ok_type(infer(OpKind::kCumsum, {"i32[b,3]"}, {{"dimension", int64_t{0}}, {"reverse", int64_t{1}}})),
            "i32[b,3]");
  EXPECT_THAT(err(infer(OpKind::kCumsum, {"i32[3]"}, {{"dimension", int64_t{0}}, {"reverse", int64_t{2}}})),
              HasSubstr("'reverse' is 2, expected 0 or 1"));
}

Attrs dot_attrs(Ints lb, Ints rb, Ints lc, Ints rc) {
  return {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contracting", lc}, {"rhs_contracting", rc}};
}

TEST(ShapeRules, DotGeneral) {
  EXPECT_EQ(ok_type(infer(OpKind::kDotGeneral, {"f32[b,784]", "f32[784,10]"}, dot_attrs({}, {}, {1}, {0}))),
            "f32[b,10]");
  EXPECT_EQ(err(infer(OpKind::kDotGeneral, {"f32[b,128]", "f32[64,10]"}, dot_attrs({}, {}, {1}, {0}))),
            "[dot_general] contracting dimensions differ: lhs f32[b,128] dim 1 is 128, rhs f32[64,10] dim 0 is 64");
  // Batched: batch dims, then lhs free, then rhs free.
  EXPECT_EQ(ok_type(infer(OpKind::kDotGeneral, {"f32[5,h,b,d]", "f32[h,d,7,5]"}, dot_attrs({0, 1}, {3, 0}, {3}, {1}))),
            "f32[5,h,b,7]");
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[5,3]", "f32[4,3]"}, dot_attrs({0}, {0}, {1}, {1}))),
              HasSubstr("batch dimensions differ: lhs f32[5,3] dim 0 is 5, rhs f32[4,3] dim 0 is 4"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3]", "f32[3]"}, dot_attrs({}, {}, {0}, {}))),
              HasSubstr("contracting dimension counts differ"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3]", "f32[3]"}, dot_attrs({0}, {}, {}, {}))),
              HasSubstr("batch dimension counts differ"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3,3]", "f32[3,3]"}, dot_attrs({0}, {0}, {0}, {1}))),
              HasSubstr("lhs dimension 0 appears twice"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3]", "f32[3]"}, dot_attrs({}, {}, {1}, {0}))),
              HasSubstr("lhs dimension 1 out of range"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3]", "f16[3]"}, dot_attrs({}, {}, {0}, {0}))),
              HasSubstr("operand dtypes differ"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"f32[3]", "f32[3]"}, {})), HasSubstr("missing attribute 'lhs_batch'"));
}

TEST(ShapeRules, IndexingAndRandom) {
  EXPECT_EQ(ok_type(infer(OpKind::kTake, {"f32[n,d]", "i32[b,k]"})), "f32[b,k,d]");
  EXPECT_THAT(err(infer(OpKind::kTake, {"f32[n,d]", "f32[b]"})), HasSubstr("[take] indices must be integer"));
  EXPECT_THAT(err(infer(OpKind::kTake, {"f32[]", "i32[b]"})), HasSubstr("rank >= 1"));
  EXPECT_EQ(ok_type(infer(OpKind::kScatterAdd, {"f32[n,d]", "i32[b]", "f32[b,d]"})), "f32[n,d]");
  EXPECT_THAT(err(infer(OpKind::kScatterAdd, {"f32[n,d]", "i32[b]", "f32[b,e]"})),
              HasSubstr("updates f32[b,e] must have shape indices.shape + operand.shape[1:] = [b,d]"));
  EXPECT_THAT(err(infer(OpKind::kScatterAdd, {"f32[n,d]", "i32[b]", "f16[b,d]"})), HasSubstr("updates dtype differs"));
  EXPECT_EQ(ok_type(infer(OpKind::kThreefry2x32, {"u32[2]", "u32[b,2]"})), "u32[b,2]");
  EXPECT_THAT(err(infer(OpKind::kThreefry2x32, {"i32[2]", "u32[b,2]"})), HasSubstr("key must be u32[2], found i32[2]"));
  EXPECT_THAT(err(infer(OpKind::kThreefry2x32, {"u32[2]", "u32[b,3]"})), HasSubstr("counts must be u32[..., 2]"));
}

TEST(ShapeRules, MoreErrorPaths) {
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4,4]"}, {{"start", S("0")}, {"limit", S("1")}, {"strides", Ints{1}}})),
              HasSubstr("must each have 2 entries for f32[4,4]"));
  EXPECT_THAT(err(infer(OpKind::kSlice, {"f32[4]"}, {{"start", Ints{0}}, {"limit", S("1")}, {"strides", Ints{1}}})),
              HasSubstr("[slice] attribute 'start' expected dims, found ints"));
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {"f32[4]", "i32[]"}, {{"sizes", S("1, 1")}})),
              HasSubstr("sizes [1,1] must have 1 entries"));
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {"f32[4]", "i32[1]"}, {{"sizes", S("1")}})),
              HasSubstr("must be an integer scalar, found i32[1]"));
  EXPECT_THAT(err(infer(OpKind::kPad, {"f32[3]", "f32[]"}, {{"low", S("0, 0")}, {"high", S("0")}, {"interior", Ints{0}}})),
              HasSubstr("must each have 1 entries"));
  EXPECT_THAT(err(infer(OpKind::kArgMax, {"f32[3]"}, {{"dimension", int64_t{1}}, {"index_dtype", DType::kInt32}})),
              HasSubstr("[argmax] attribute 'dimension' is 1, expected an axis in [0, 1)"));
  EXPECT_THAT(err(infer(OpKind::kDotGeneral, {"bool[3]", "bool[3]"}, {{"lhs_batch", Ints{}}, {"rhs_batch", Ints{}},
                                                                     {"lhs_contracting", Ints{0}},
                                                                     {"rhs_contracting", Ints{0}}})),
              HasSubstr("[dot_general] operands must be numeric"));
  EXPECT_THAT(err(infer(OpKind::kCumsum, {"bool[3]"}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}})),
              HasSubstr("[cumsum] operand must be numeric"));
  EXPECT_THAT(err(infer(OpKind::kCumsum, {"f32[3]"}, {{"dimension", int64_t{-1}}, {"reverse", int64_t{0}}})),
              HasSubstr("attribute 'dimension' is -1"));
  EXPECT_THAT(err(infer(OpKind::kScatterAdd, {"f32[]", "i32[2]", "f32[2]"})), HasSubstr("[scatter_add] operand must have rank >= 1"));
  EXPECT_THAT(err(infer(OpKind::kScatterAdd, {"f32[4]", "f32[2]", "f32[2]"})), HasSubstr("indices must be integer"));
  EXPECT_THAT(err(infer(OpKind::kScatterAdd, {"bool[4]", "i32[2]", "bool[2]"})), HasSubstr("operand must be numeric"));
  EXPECT_THAT(err(infer(OpKind::kTake, {"f32[4]", "bool[2]"})), HasSubstr("indices must be integer, found bool[2]"));
  EXPECT_THAT(err(infer(OpKind::kThreefry2x32, {"u32[2]", "i32[3,2]"})), HasSubstr("counts must be u32[..., 2], found i32[3,2]"));
  EXPECT_THAT(err(infer(OpKind::kThreefry2x32, {"u32[3]", "u32[3,2]"})), HasSubstr("key must be u32[2], found u32[3]"));
  EXPECT_THAT(err(infer(OpKind::kReshape, {"f32[4]"}, {{"shape", S("-2, -2")}})), HasSubstr("entry 0 is -2, expected >= 0"));
  EXPECT_THAT(err(infer(OpKind::kReshape, {"f32[b]"}, {{"shape", S("c")}})),
              HasSubstr("element counts differ: operand f32[b] has b, shape [c] has c"));
  EXPECT_THAT(err(infer(OpKind::kReverse, {"f32[3]"}, {{"dimensions", Ints{0, 0}}})), HasSubstr("repeats axis 0"));
  EXPECT_THAT(err(infer(OpKind::kIota, {}, {{"dtype", DType::kInt32}, {"shape", S("-1")}, {"dimension", int64_t{0}}})),
              HasSubstr("[iota] attribute 'shape' entry 0 is -1"));
  EXPECT_THAT(err(infer(OpKind::kConcatenate, {"f32[2]", "f32[2,1]"}, {{"dimension", int64_t{0}}})),
              HasSubstr("operand ranks differ"));
  EXPECT_THAT(err(infer(OpKind::kDynamicSlice, {}, {{"sizes", S("1")}})), HasSubstr("got no operands"));
  EXPECT_THAT(err(infer(OpKind::kBroadcastInDim, {"f32[b]"}, {{"shape", S("c")}, {"broadcast_dimensions", Ints{0}}})),
              HasSubstr("operand f32[b] dim 0 is b, expected 1 or result f32[c] dim 0 which is c"));
}

TEST(ShapeRules, ScopeEqualityRewrites) {
  // With "b == 2*c" in scope, f32[b] and f32[2*c] are the same shape.
  SymbolicScope scope = value_or_throw(SymbolicScope::create({"b == 2*c"}));
  EXPECT_EQ(ok_type(infer(OpKind::kAdd, {"f32[b]", "f32[2*c]"}, {}, scope)), "f32[b]");
  EXPECT_THAT(err(infer(OpKind::kAdd, {"f32[b]", "f32[2*c]"})), HasSubstr("operand shapes differ"));
}

TEST(Verify, AcceptsBuiltProgramsAndNamesTheBadInstruction) {
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(T("f32[b,4]"));
  ValueId e = b.unary(OpKind::kExp, x);
  ValueId s = b.reduce_sum(e, {1});
  Program p = std::move(b).build({s});
  EXPECT_TRUE(verify(p).ok());
  Program bad = p;
  bad.instrs[1].type = T("f32[4]");
  EXPECT_THAT(std::string(verify(bad).message()),
              HasSubstr("[verify] instruction 1 (%2 = reduce_sum): recorded type f32[4] differs from inferred type f32[b]"));
  bad = p;
  bad.instrs[0].operands = {2};
  EXPECT_THAT(std::string(verify(bad).message()), HasSubstr("operand %2 is not defined before this instruction"));
  bad = p;
  bad.results = {7};
  EXPECT_THAT(std::string(verify(bad).message()), HasSubstr("result 0 refers to %7"));
  bad = p;
  bad.params[0] = T("f32[-1,4]");
  EXPECT_THAT(std::string(verify(bad).message()), HasSubstr("[verify] parameter %0 has a negative dimension"));
  bad = p;
  bad.instrs[1].attrs.set("dimensions", Ints{3});
  EXPECT_THAT(std::string(verify(bad).message()), HasSubstr("[reduce_sum] attribute 'dimensions'"));
}

TEST(Builder, ConvenienceEmitters) {
  ProgramBuilder b("g");
  ValueId x = b.add_parameter(T("f16[b,3]"));
  ValueId one = b.full_like(x, 1.0);
  EXPECT_EQ(b.type(one).to_string(), "f16[b,3]");
  ValueId c = b.scalar_constant(DType::kInt32, 7);
  EXPECT_EQ(b.type(c).to_string(), "i32[]");
  ValueId y = b.binary(OpKind::kAdd, x, one);
  ValueId t = b.transpose(y, {1, 0});
  EXPECT_EQ(b.type(t).to_string(), "f16[3,b]");
  ValueId r = b.reshape(t, S("3*b"));
  EXPECT_EQ(b.type(r).to_string(), "f16[3*b]");
  ValueId cv = b.convert(r, DType::kFloat32);
  ValueId gt = b.binary(OpKind::kGt, cv, cv);
  ValueId sel = b.select(gt, cv, cv);
  EXPECT_EQ(b.type(sel).to_string(), "f32[3*b]");
  EXPECT_THROW(b.binary(OpKind::kAdd, x, c), InvalidArgument);
  EXPECT_THROW(b.add_parameter(T("f32[]")), FailedPrecondition);  // would renumber instructions
  EXPECT_THAT(std::string(b.emit(OpKind::kNeg, {99}).status().message()),
              HasSubstr("[neg] operand %99 is not a value of this program"));
  ProgramBuilder bad("bad");
  EXPECT_THROW(std::move(bad).build({0}), InvalidArgument);
  Program p = std::move(b).build({sel});
  EXPECT_TRUE(verify(p).ok());
  EXPECT_EQ(p.result_types()[0].to_string(), "f32[3*b]");
}

TEST(OpTable, NamesRoundTripAndArity) {
  for (int i = 0; i < kNumOpKinds; ++i) {
    OpKind k = static_cast<OpKind>(i);
    EXPECT_EQ(op_info(k).kind, k);
    EXPECT_EQ(op_from_name(op_name(k)), k);
  }
  EXPECT_EQ(op_name(OpKind::kDotGeneral), "dot_general");
  EXPECT_EQ(op_name(OpKind::kBroadcastInDim), "broadcast_in_dim");
  EXPECT_EQ(op_name(OpKind::kThreefry2x32), "threefry2x32");
  EXPECT_EQ(op_info(OpKind::kSelect).arity, 3);
  EXPECT_FALSE(op_from_name("nope").has_value());
  EXPECT_TRUE(is_elementwise(OpKind::kAdd));
  EXPECT_FALSE(is_elementwise(OpKind::kDotGeneral));
}

}  // namespace
}  // namespace mcx::ir
