#include "mcx/ir/passes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir_test_programs.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"
#include "tests/support/reference_eval.h"

namespace mcx::ir {
namespace {

using ::testing::HasSubstr;
using testing_programs::type_of;
using Ints = std::vector<int64_t>;

Program parse(std::string_view text) {
  auto p = parse_program(text);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

// Folds through the independent reference evaluator: one instruction as a one-op program.
absl::StatusOr<Buffer> reference_fold(const Instr& ins, std::span<const Buffer> args, int* calls = nullptr) {
  if (calls) ++*calls;
  Program p;
  for (const Buffer& b : args) p.params.push_back(b.abstract_value());
  Instr one = ins;
  one.operands.clear();
  for (size_t i = 0; i < args.size(); ++i) one.operands.push_back(static_cast<ValueId>(i));
  p.instrs.push_back(one);
  p.results = {static_cast<ValueId>(args.size())};
  MCX_ASSIGN_OR_RETURN(std::vector<Buffer> out, test::reference_evaluate(p, args));
  return out[0];
}

TEST(Passes, DeadCodeElimination) {
  Program p = parse(
      "program @f(%0: f32[n], %1: f32[n]) -> (f32[n]) {\n"
      "  %2 = exp(%0) : f32[n]\n"
      "  %3 = log(%1) : f32[n]\n"
      "  %4 = add(%2, %0) : f32[n]\n"
      "  %5 = neg(%3) : f32[n]\n"
      "  return (%4)\n"
      "}\n");
  Program d = eliminate_dead_code(p);
  EXPECT_EQ(print_program(d),
            "program @f(%0: f32[n], %1: f32[n]) -> (f32[n]) {\n"
            "  %2 = exp(%0) : f32[n]\n"
            "  %3 = add(%2, %0) : f32[n]\n"
            "  return (%3)\n"
            "}\n");
  EXPECT_TRUE(verify(d).ok());
  // Nothing to remove: unchanged.
  EXPECT_TRUE(structurally_equal(eliminate_dead_code(d), d));
}

TEST(Passes, CommonSubexpressionElimination) {
  Program p = parse(
      "program @f(%0: f32[2], %1: f32[2]) -> (f32[2], f32[2], f32[2]) {\n"
      "  %2 = constant() {value=f32[2]{1, 2}} : f32[2]\n"
      "  %3 = constant() {value=f32[2]{1, 2}} : f32[2]\n"
      "  %4 = constant() {value=f32[2]{1, 3}} : f32[2]\n"
      "  %5 = add(%0, %2) : f32[2]\n"
      "  %6 = add(%0, %3) : f32[2]\n"     // same as %5 once %3 -> %2
      "  %7 = add(%0, %4) : f32[2]\n"     // different constant data
      "  %8 = add(%2, %0) : f32[2]\n"     // operand order differs: kept
      "  %9 = mul(%5, %7) : f32[2]\n"
      "  %10 = mul(%6, %7) : f32[2]\n"    // same as %9 transitively
      "  %11 = reduce_sum(%10) {dimensions=[0]} : f32[]\n"
      "  %12 = reduce_max(%10) {dimensions=[0]} : f32[]\n"
      "  %13 = add(%11, %12) : f32[]\n"
      "  %14 = broadcast_in_dim(%13) {broadcast_dimensions=[], shape=dims[2]} : f32[2]\n"
      "  %15 = add(%9, %14) : f32[2]\n"
      "  %16 = add(%10, %14) : f32[2]\n"
      "  return (%15, %16, %8)\n"
      "}\n");
  Program c = eliminate_common_subexpressions(p);
  EXPECT_EQ(print_program(c),
            "program @f(%0: f32[2], %1: f32[2]) -> (f32[2], f32[2], f32[2]) {\n"
            "  %2 = constant() {value=f32[2]{1, 2}} : f32[2]\n"
            "  %3 = constant() {value=f32[2]{1, 3}} : f32[2]\n"
            "  %4 = add(%0, %2) : f32[2]\n"
            "  %5 = add(%0, %3) : f32[2]\n"
            "  %6 = add(%2, %0) : f32[2]\n"
            "  %7 = mul(%4, %5) : f32[2]\n"
            "  %8 = reduce_sum(%7) {dimensions=[0]} : f32[]\n"
            "  %9 = reduce_max(%7) {dimensions=[0]} : f32[]\n"
            "  %10 = add(%8, %9) : f32[]\n"
            "  %11 = broadcast_in_dim(%10) {broadcast_dimensions=[], shape=dims[2]} : f32[2]\n"
            "  %12 = add(%7, %11) : f32[2]\n"
            "  return (%12, %12, %6)\n"
            "}\n");
  EXPECT_TRUE(verify(c).ok());
  // Same results numerically (reference evaluator) before and after.
  std::vector<Buffer> args = {Buffer::from_vector<float>({0.5f, -1.0f}, {2}),
                              Buffer::from_vector<float>({2.0f, 3.0f}, {2})};
  auto a = value_or_throw(test::reference_evaluate(p, args));
  auto b = value_or_throw(test::reference_evaluate(c, args));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i;
  // -0 and +0 constants are different data: not merged.
  Program z = parse(
      "program @z() -> (f32[], f32[]) {\n"
      "  %0 = constant() {value=f32[]{0}} : f32[]\n"
      "  %1 = constant() {value=f32[]{-0}} : f32[]\n"
      "  return (%0, %1)\n"
      "}\n");
  EXPECT_EQ(eliminate_common_subexpressions(z).instrs.size(), 2u);
}

TEST(Passes, ConstantFoldingThroughTheEvaluator) {
  Program p = parse(
      "program @f(%0: f32[2]) -> (f32[2], f32[]) {\n"
      "  %1 = constant() {value=f32[2]{1, 2}} : f32[2]\n"
      "  %2 = constant() {value=f32[2]{10, 20}} : f32[2]\n"
      "  %3 = add(%1, %2) : f32[2]\n"          // foldable
      "  %4 = mul(%3, %3) : f32[2]\n"          // foldable after %3
      "  %5 = add(%0, %4) : f32[2]\n"          // depends on a parameter
      "  %6 = iota() {dimension=0, dtype=f32, shape=dims[2]} : f32[2]\n"  // nullary: left alone
      "  %7 = reduce_sum(%4) {dimensions=[0]} : f32[]\n"
      "  return (%5, %7)\n"
      "}\n");
  int calls = 0;
  auto folded = fold_constants(p, [&](const Instr& i, std::span<const Buffer> a) {
    return reference_fold(i, a, &calls);
  });
  ASSERT_TRUE(folded.ok()) << folded.status().message();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(print_program(*folded),
            "program @f(%0: f32[2]) -> (f32[2], f32[]) {\n"
            "  %1 = constant() {value=f32[2]{121, 484}} : f32[2]\n"
            "  %2 = add(%0, %1) : f32[2]\n"
            "  %3 = constant() {value=f32[]{605}} : f32[]\n"
            "  return (%2, %3)\n"
            "}\n");
  EXPECT_TRUE(verify(*folded).ok());

  // Size limit: results larger than max_elements are not folded.
  calls = 0;
  auto limited = fold_constants(
      p, [&](const Instr& i, std::span<const Buffer> a) { return reference_fold(i, a, &calls); },
      FoldOptions{.max_elements = 1});
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(limited->instrs.size(), 6u);  // dead iota removed, nothing folded

  // Evaluator errors are reported with the instruction.
  auto failing = fold_constants(p, [](const Instr&, std::span<const Buffer>) -> absl::StatusOr<Buffer> {
    return absl::UnimplementedError("no kernel");
  });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(failing.status().message()), HasSubstr("[fold_constants] instruction %3 (add): no kernel"));
  // A wrong result type from the evaluator is an internal error.
  auto wrong = fold_constants(p, [](const Instr&, std::span<const Buffer>) -> absl::StatusOr<Buffer> {
    return Buffer::from_vector<double>({1, 2}, {2});
  });
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("returned f64[2], expected f32[2]"));
}

TEST(Passes, SpecializeSubstitutesChecksAndReinfers) {
  Program p = parse(
      "program @f(%0: f32[b,4], %1: f32[c]) -> (f32[2*b], f32[b,2]) where b >= 2, c <= 100 {\n"
      "  %2 = reshape(%0) {shape=dims[2*b,2]} : f32[2*b,2]\n"
      "  %3 = reduce_sum(%2) {dimensions=[1]} : f32[2*b]\n"
      "  %4 = slice(%0) {limit=dims[b,4], start=dims[0,2], strides=[1, 1]} : f32[b,2]\n"
      "  return (%3, %4)\n"
      "}\n");
  auto s = specialize(p, {{"b", 3}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(print_program(*s),
            "program @f(%0: f32[3,4], %1: f32[c]) -> (f32[6], f32[3,2]) where c <= 100 {\n"
            "  %2 = reshape(%0) {shape=dims[6,2]} : f32[6,2]\n"
            "  %3 = reduce_sum(%2) {dimensions=[1]} : f32[6]\n"
            "  %4 = slice(%0) {limit=dims[3,4], start=dims[0,2], strides=[1, 1]} : f32[3,2]\n"
            "  return (%3, %4)\n"
            "}\n");
  EXPECT_TRUE(verify(*s).ok());
  auto full = specialize(p, {{"b", 2}, {"c", 100}});
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_TRUE(full->scope.constraints().empty());
  EXPECT_EQ(full->params[1].to_string(), "f32[100]");

  EXPECT_THAT(std::string(specialize(p, {{"b", 1}}).status().message()),
              HasSubstr("[specialize] constraint 'b >= 2' is violated for b = 1 (1 >= 2 is false)"));
  EXPECT_THAT(std::string(specialize(p, {{"c", 0}}).status().message()),
              HasSubstr("[specialize] dimension variable c = 0, expected >= 1"));
  EXPECT_THAT(std::string(specialize(p, {{"d", 5}}).status().message()),
              HasSubstr("[specialize] unknown dimension variable 'd'; the program has b, c"));
  // A shape rule that only fails for concrete sizes.
  Program q = parse(
      "program @g(%0: f32[b]) -> (f32[4]) where b >= 4 {\n"
      "  %1 = slice(%0) {limit=dims[b], start=dims[b - 4], strides=[1]} : f32[4]\n"
      "  return (%1)\n"
      "}\n");
  auto ok = specialize(q, {{"b", 4}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->instrs[0].type.to_string(), "f32[4]");
}

TEST(Passes, SpecializeEveryOpToStaticShapes) {
  Program p = testing_programs::all_ops_program();
  auto s = specialize(p, {{"b", 3}, {"c", 5}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(verify(*s).ok());
  for (const AbstractValue& t : s->params) EXPECT_TRUE(is_static(t.shape)) << t.to_string();
  for (const Instr& i : s->instrs) EXPECT_TRUE(is_static(i.type.shape)) << i.type.to_string();
  EXPECT_TRUE(s->scope.constraints().empty());
  // The specialized program evaluates (the reference evaluator takes static shapes only).
  std::vector<Buffer> args;
  uint64_t seed = 1;
  for (const AbstractValue& t : s->params) {
    std::vector<int64_t> dims = value_or_throw(to_concrete(t.shape));
    Buffer b = Buffer::zeros(t.dtype, dims);
    if (t.dtype == DType::kFloat32) b = Buffer::from_vector<float>(std::vector<float>(b.num_elements(), 0.25f * seed++), dims);
    args.push_back(b);
  }
  auto out = test::reference_evaluate(*s, args);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->size(), s->results.size());
}

std::string solve_error(const Program& p, std::vector<std::vector<int64_t>> dims) {
  auto v = solve_dimension_values(p, dims);
  return v.ok() ? "solved" : std::string(v.status().message());
}

TEST(Passes, SolveDimensionValuesFromArgumentShapes) {
  Program p = parse(
      "program @f(%0: f32[b,2*c + 1], %1: f32[c,b*c], %2: f32[d // 2]) -> (f32[b,2*c + 1]) where b >= 2 {\n"
      "  return (%0)\n"
      "}\n");
  auto v = solve_dimension_values(p, std::vector<std::vector<int64_t>>{{4, 7}, {3, 12}, {5}});
  // d occurs only in a non-linear dimension: not determined.
  EXPECT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("dimension variable d of parameter %2 f32[d // 2] is not determined"));
  Program q = parse(
      "program @f(%0: f32[b,2*c + 1], %1: f32[c,b*c]) -> (f32[b,2*c + 1]) where b >= 2 {\n"
      "  return (%0)\n"
      "}\n");
  auto ok = solve_dimension_values(q, std::vector<std::vector<int64_t>>{{4, 7}, {3, 12}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, (std::map<std::string, int64_t>{{"b", 4}, {"c", 3}}));
  auto s = specialize(q, *ok);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->params[1].to_string(), "f32[3,12]");

  EXPECT_THAT(solve_error(q, {{4, 7}, {3, 13}}),
              HasSubstr("argument 1 [3,13] dim 1 is 13, but parameter %1 f32[c,b*c] has b*c = 12 for b = 4, c = 3"));
  EXPECT_THAT(solve_error(q, {{4, 8}, {3, 12}}), HasSubstr("dim 1 is 8, but parameter %0 f32[b,2*c + 1] needs 2*c + 1"));
  EXPECT_THAT(solve_error(q, {{1, 7}, {3, 3}}), HasSubstr("constraint 'b >= 2' is violated (1 >= 2 is false)"));
  EXPECT_THAT(solve_error(q, {{4, 7}}), HasSubstr("got 1 argument shapes for 2 parameters"));
  EXPECT_THAT(solve_error(q, {{4}, {3, 12}}), HasSubstr("argument 0 has rank 1, parameter %0 is f32[b,2*c + 1]"));
}

TEST(Passes, FoldingPreservesValues) {
  Program p = parse(
      "program @f(%0: f32[3]) -> (f32[3], f32[3], i32[2,3]) {\n"
      "  %1 = constant() {value=f32[3]{0.5, -2, 3}} : f32[3]\n"
      "  %2 = constant() {value=i32[2]{7, -3}} : i32[2]\n"
      "  %3 = exp(%1) : f32[3]\n"
      "  %4 = tanh(%3) : f32[3]\n"
      "  %5 = mul(%0, %4) : f32[3]\n"
      "  %6 = broadcast_in_dim(%2) {broadcast_dimensions=[0], shape=dims[2,3]} : i32[2,3]\n"
      "  %7 = cumsum(%6) {dimension=1, reverse=0} : i32[2,3]\n"
      "  %8 = reverse(%4) {dimensions=[0]} : f32[3]\n"
      "  %9 = sub(%5, %8) : f32[3]\n"
      "  return (%9, %4, %7)\n"
      "}\n");
  auto folded = fold_constants(p, [](const Instr& i, std::span<const Buffer> a) { return reference_fold(i, a); });
  ASSERT_TRUE(folded.ok()) << folded.status().message();
  int non_constant = 0;
  for (const Instr& i : folded->instrs) non_constant += i.kind != OpKind::kConstant;
  EXPECT_EQ(non_constant, 2);  // mul and sub depend on the parameter
  std::vector<Buffer> args = {Buffer::from_vector<float>({1.0f, -3.5f, 0.125f}, {3})};
  auto a = value_or_throw(test::reference_evaluate(p, args));
  auto b = value_or_throw(test::reference_evaluate(*folded, args));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bitwise_equal(b[i])) << i;
}

}  // namespace
}  // namespace mcx::ir
