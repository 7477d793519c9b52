#include "mcx/ir/text.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir_test_programs.h"
#include "mcx/ir/shape_rules.h"

namespace mcx::ir {
namespace {

using ::testing::HasSubstr;
using testing_programs::all_ops_program;
using testing_programs::type_of;

// print -> parse -> print is the identity, and the parsed program is structurally equal.
void expect_round_trip(const Program& p) {
  std::string text = print_program(p);
  auto parsed = parse_program(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message() << "\n" << text;
  EXPECT_EQ(print_program(*parsed), text);
  EXPECT_TRUE(structurally_equal(*parsed, p)) << text;
  EXPECT_TRUE(verify(*parsed).ok()) << verify(*parsed).message();
}

TEST(Text, RoundTripsEveryOpKind) {
  Program p = all_ops_program();
  Program spmd = testing_programs::spmd_ops_program();
  Program window = testing_programs::window_ops_program();
  Program special = testing_programs::special_ops_program();
  Program functions = testing_programs::special_functions_program();
  Program remat = testing_programs::remat_program();
  Program control = testing_programs::control_flow_program();
  Program custom = testing_programs::custom_rules_program();
  Program shard_map = testing_programs::shard_map_program();
  auto used = testing_programs::kinds_used(p);
  for (OpKind k : testing_programs::kinds_used(control)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(custom)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(shard_map)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(functions)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(remat)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(spmd)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(window)) used.insert(k);
  for (OpKind k : testing_programs::kinds_used(special)) used.insert(k);
  for (int i = 0; i < kNumOpKinds; ++i)
    EXPECT_TRUE(used.count(static_cast<OpKind>(i)))
        << "all_ops_program + spmd_ops_program + window_ops_program + special_ops_program + "
           "special_functions_program + remat_program + control_flow_program + custom_rules_program + "
           "shard_map_program lack "
        << op_name(static_cast<OpKind>(i));
  expect_round_trip(special);
  expect_round_trip(functions);
  expect_round_trip(remat);
  expect_round_trip(control);
  expect_round_trip(custom);
  expect_round_trip(shard_map);
  expect_round_trip(p);
  expect_round_trip(spmd);
  expect_round_trip(window);
  std::string text = print_program(p);
  EXPECT_THAT(text, HasSubstr("program @all_ops(%0: f32[b,4], %1: f32[b,4]"));
  EXPECT_THAT(text, HasSubstr(" where b >= 2, max(b, c) <= 4096 {\n"));
  EXPECT_THAT(text, HasSubstr("= dot_general(%0, %6) {lhs_batch=[], lhs_contracting=[1], rhs_batch=[], "
                              "rhs_contracting=[0]} : f32[b,3]\n"));
  EXPECT_THAT(text, HasSubstr("{high=dims[0,2], interior=[1, 0], low=dims[1,-1]} : f32[2*b,5]"));
  EXPECT_THAT(text, HasSubstr("constant() {value=f32[3]{1.5, -0, 3.25}} : f32[3]"));
}

TEST(Text, ExactFormOfASmallProgram) {
  ProgramBuilder b("loss", value_or_throw(SymbolicScope::create({"b >= 16"})));
  ValueId x = b.add_parameter(type_of("f32[b,784]"));
  ValueId w = b.add_parameter(type_of("f32[784,10]"));
  ValueId d = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                              {{"lhs_batch", std::vector<int64_t>{}}, {"rhs_batch", std::vector<int64_t>{}},
                               {"lhs_contracting", std::vector<int64_t>{1}},
                               {"rhs_contracting", std::vector<int64_t>{0}}});
  ValueId s = b.reduce_sum(d, {0, 1});
  Program p = std::move(b).build({s});
  EXPECT_EQ(print_program(p),
            "program @loss(%0: f32[b,784], %1: f32[784,10]) -> (f32[]) where b >= 16 {\n"
            "  %2 = dot_general(%0, %1) {lhs_batch=[], lhs_contracting=[1], rhs_batch=[], rhs_contracting=[0]} "
            ": f32[b,10]\n"
            "  %3 = reduce_sum(%2) {dimensions=[0, 1]} : f32[]\n"
            "  return (%3)\n"
            "}\n");
}

template <typename U, typename T>
T from_bits(U bits) {
  T v;
  std::memcpy(static_cast<void*>(&v), &bits, sizeof(U));
  return v;
}

// A constant of every dtype with edge values; all bit patterns must survive.
std::vector<Buffer> edge_buffers() {
  std::vector<Buffer> out;
  out.push_back(Buffer::from_vector<bool>({true, false, true}, {3}));
  out.push_back(Buffer::from_vector<int8_t>({-128, 127, 0, -1}, {2, 2}));
  out.push_back(Buffer::from_vector<int16_t>({-32768, 32767, 5}, {3}));
  out.push_back(Buffer::from_vector<int32_t>({std::numeric_limits<int32_t>::min(), 2147483647, -7}, {3}));
  out.push_back(Buffer::from_vector<int64_t>({std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max(), 0}, {3, 1}));
  out.push_back(Buffer::from_vector<uint8_t>({0, 255, 17}, {3}));
  out.push_back(Buffer::from_vector<uint32_t>({0, 4294967295u, 123456789u}, {3}));
  float fnan_payload = from_bits<uint32_t, float>(0x7fc00123u);
  float fneg_nan = from_bits<uint32_t, float>(0xffc00000u);
  out.push_back(Buffer::from_vector<float>(
      {0.1f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
       std::numeric_limits<float>::quiet_NaN(), fnan_payload, fneg_nan, std::numeric_limits<float>::denorm_min(),
       std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), 1e-30f, 16777217.0f},
      {3, 4}));
  out.push_back(Buffer::from_vector<double>(
      {0.1, -0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
       from_bits<uint64_t, double>(0x7ff0000000000001ull), std::numeric_limits<double>::denorm_min(),
       std::numeric_limits<double>::max(), 1.0 / 3.0},
      {8}));
  std::vector<float16_t> h;
  for (uint16_t bits : {0x0000, 0x8000, 0x3c00, 0x0001, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0x3555}) {
    float16_t v;
    v.bits = bits;
    h.push_back(v);
  }
  out.push_back(Buffer::from_vector<float16_t>(h, {10}));
  std::vector<bfloat16_t> bf;
  for (uint16_t bits : {0x0000, 0x8000, 0x3f80, 0x0001, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3eab}) {
    bfloat16_t v;
    v.bits = bits;
    bf.push_back(v);
  }
  out.push_back(Buffer::from_vector<bfloat16_t>(bf, {2, 5}));
  out.push_back(Buffer::zeros(DType::kFloat32, {0, 3}));
  out.push_back(Buffer::scalar<double>(-2.5));
  return out;
}

TEST(Text, ConstantsOfEveryDtypeRoundTripBitExactly) {
  std::set<DType> seen;
  ProgramBuilder b("consts");
  std::vector<ValueId> results;
  for (const Buffer& buf : edge_buffers()) {
    seen.insert(buf.dtype());
    results.push_back(b.constant(buf));
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kNumDTypes);
  Program p = std::move(b).build(results);
  expect_round_trip(p);
  auto parsed = parse_program(print_program(p));
  ASSERT_TRUE(parsed.ok());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    Buffer want = value_or_throw(p.instrs[i].attrs.get_buffer("value"));
    Buffer got = value_or_throw(parsed->instrs[i].attrs.get_buffer("value"));
    EXPECT_TRUE(got.bitwise_equal(want)) << print_attr(Attr(want)) << " vs " << print_attr(Attr(got));
  }
  std::string text = print_program(p);
  EXPECT_THAT(text, HasSubstr("f32[3,4]{0.1, -0, inf, -inf, nan, nan:0x7fc00123, nan:0xffc00000, 1e-45, "));
  EXPECT_THAT(text, HasSubstr("bool[3]{true, false, true}"));
  EXPECT_THAT(text, HasSubstr("i64[3,1]{-9223372036854775808, 9223372036854775807, 0}"));
  EXPECT_THAT(text, HasSubstr("f16[10]{0, -0, 1, 5.9604645e-08, 65504, inf, -inf, nan, nan:0x7d01, "));
}

TEST(Text, EveryDtypeAsParameterAndAttribute) {
  ProgramBuilder b("dtypes");
  std::vector<ValueId> results;
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    ValueId p = b.add_parameter(AbstractValue{t, symbolic_shape("n, 2")});
    results.push_back(p);
  }
  for (int i = 0; i < kNumDTypes; ++i) results.push_back(b.convert(results[i], static_cast<DType>(i)));
  expect_round_trip(std::move(b).build(results));
}

TEST(Text, ParserAcceptsOtherValueNamesCommentsAndQuotedNames) {
  std::string text =
      "// a comment\n"
      "program @\"my prog\\\"x\"(%x: f32[n], %y: f32[n]) -> (f32[n], f32[n]) {\n"
      "  %sum = add(%x, %y) : f32[n]   // trailing comment\n"
      "  %e = exp(%sum) : f32[n]\n"
      "  return (%e, %x)\n"
      "}\n";
  auto p = parse_program(text);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->name, "my prog\"x");
  EXPECT_EQ(print_program(*p),
            "program @\"my prog\\\"x\"(%0: f32[n], %1: f32[n]) -> (f32[n], f32[n]) {\n"
            "  %2 = add(%0, %1) : f32[n]\n"
            "  %3 = exp(%2) : f32[n]\n"
            "  return (%3, %0)\n"
            "}\n");
  expect_round_trip(*p);
}

std::string parse_error(std::string_view text) {
  auto p = parse_program(text);
  if (p.ok()) return "parsed OK";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(Text, ParseErrorsNamePositionAndExpectation) {
  EXPECT_EQ(parse_error("progrm @f() -> () {\n  return ()\n}"),
            "[parse_program] line 1, column 1: expected 'program', found 'progrm'");
  EXPECT_EQ(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp(%0 : f32[2]\n  return (%1)\n}"),
            "[parse_program] line 2, column 15: expected ',', found ':'");
  EXPECT_EQ(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %1 = frobnicate(%0) : f32[2]\n  return (%1)\n}"),
            "[parse_program] line 2, column 8: unknown op 'frobnicate'");
  EXPECT_EQ(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp(%7) : f32[2]\n  return (%1)\n}"),
            "[parse_program] line 2, column 12: value %7 is used before it is defined");
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %1 = exp(%0) : f32[3]\n  return (%1)\n}"),
              HasSubstr("line 2, column 18: written type f32[3] differs from the inferred type f32[2]"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2], %1: f32[3]) -> (f32[2]) {\n  %2 = add(%0, %1) : f32[2]\n"
                          "  return (%2)\n}"),
              HasSubstr("line 2, column 8: [add] operand shapes differ: f32[2] vs f32[3]"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> (f32[3]) {\n  return (%0)\n}"),
              HasSubstr("line 2, column 11: result 0 has type f32[2] but the header declares f32[3]"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %0 = exp(%0) : f32[2]\n  return (%0)\n}"),
              HasSubstr("value %0 is defined twice"));
  EXPECT_THAT(parse_error("program @f() -> (f32[2]) {\n  %0 = constant() {value=f32[2]{1, x}} : f32[2]\n"
                          "  return (%0)\n}"),
              HasSubstr("line 2, column 36: expected a f32 element, found 'x'"));
  EXPECT_THAT(parse_error("program @f() -> (i8[1]) {\n  %0 = constant() {value=i8[1]{300}} : i8[1]\n"
                          "  return (%0)\n}"),
              HasSubstr("expected a i8 element, found '300'"));
  EXPECT_THAT(parse_error("program @f() -> (f32[3]) {\n  %0 = constant() {value=f32[3]{1, 2}} : f32[3]\n"
                          "  return (%0)\n}"),
              HasSubstr("expected 3 constant elements (found 2)"));
  EXPECT_THAT(parse_error("program @f(%0: q32[2]) -> () {\n  return ()\n}"),
              HasSubstr("line 1, column 16: expected a dtype, found 'q32'"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2,-3]) -> () {\n  return ()\n}"),
              HasSubstr("line 1, column 16: parameter type f32[2,-3] has a negative dimension"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> () where b >= {\n  return ()\n}"),
              HasSubstr("line 1, column 30: bad constraint"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> () {\n  return ()\n}\nextra"),
              HasSubstr("line 4, column 1: expected end of input after the program, found 'extra'"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  return (%0)\n"),
              HasSubstr("expected '}', found end of input"));
  EXPECT_THAT(parse_error("program @f(%0: f32[2]) -> (f32[2]) {\n  %1 = reduce_sum(%0) {dimensions=[0], dimensions=[0]}"
                          " : f32[]\n  return (%0)\n}"),
              HasSubstr("attribute 'dimensions' is given twice"));
}

}  // namespace
}  // namespace mcx::ir
