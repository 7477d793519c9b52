// The control-flow ops on the GPU (label gpu; emulated on the host as emulated_gpu/... on every machine):
// while (the predicate read back each iteration), scan (forward and reversed, carries and stacked outputs,
// sliced xs), cond (the branch index clamped), a loop nested in a scan's body, and an executable holding
// control flow serialised and read back: every result equal to the CPU's bit for bit. And debug_print, whose
// operands are copied back to the host and printed as the CPU prints them.
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/ir/builder.h"
#include "mcx/core/debug_output.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/debug_print.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/backend/element_cases.h"

namespace mcx::test {
namespace {

using ir::OpKind;
using ir::ProgramBuilder;
using ir::ValueId;

AbstractValue f32(std::vector<int64_t> dims) { return {DType::kFloat32, concrete_shape(dims)}; }

// (c, k) -> c * k + 1
std::shared_ptr<const ir::Program> step_body(AbstractValue t) {
  ProgramBuilder b("body");
  const ValueId c = b.add_parameter(t), k = b.add_parameter(t);
  const ValueId r = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, c, k), b.full_like(c, 1.0));
  return std::make_shared<const ir::Program>(std::move(b).build({r}));
}

// (c, k) -> sum(c) < limit
std::shared_ptr<const ir::Program> below(AbstractValue t, double limit) {
  ProgramBuilder b("cond");
  const ValueId c = b.add_parameter(t);
  b.add_parameter(t);
  const ValueId r = b.binary(OpKind::kLt, b.reduce_sum(c, {0}), b.scalar_constant(DType::kFloat32, limit));
  return std::make_shared<const ir::Program>(std::move(b).build({r}));
}

void expect_same(const ir::Program& program, const std::vector<Buffer>& args) {
  absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
  absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  for (size_t r = 0; r < gpu->size(); ++r) {
    EXPECT_TRUE((*gpu)[r].bitwise_equal((*cpu)[r])) << "result " << r << ": gpu " << (*gpu)[r].to_string() << " cpu "
                                                    << (*cpu)[r].to_string();
  }
}

ir::Program while_program(double limit) {
  const AbstractValue t = f32({4});
  ProgramBuilder b("while");
  const ValueId c = b.add_parameter(t), k = b.add_parameter(t);
  const std::vector<ValueId> out =
      ir::emit_siblings(b, OpKind::kWhile, ir::while_attrs({below(t, limit), step_body(t), 1, 1, 0}), std::vector<ValueId>{c, k, k}, 1);
  return std::move(b).build({out[0]});
}

TEST(GpuControlFlow, WhileRunsUntilItsPredicateIsFalse) {
  SKIP_WITHOUT_GPU();
  const Buffer c = Buffer::from_vector<float>({0.5f, 1.0f, -0.25f, 2.0f}, {4});
  const Buffer k = Buffer::from_vector<float>({1.5f, 1.25f, 2.0f, 1.1f}, {4});
  for (double limit : {-1.0, 10.0, 1000.0}) {  // no iteration, a few, many
    SCOPED_TRACE(absl::StrCat("limit ", limit));
    expect_same(while_program(limit), {c, k});
  }
}

// scan body (c, x, k) -> (c * x + k, c - x): carry f32[3], xs f32[L,3], const k f32[3].
ir::Program scan_program(int64_t length, bool reverse) {
  const AbstractValue t = f32({3});
  ProgramBuilder body("scan_body");
  const ValueId c = body.add_parameter(t), x = body.add_parameter(t), k = body.add_parameter(t);
  const ValueId next = body.binary(OpKind::kAdd, body.binary(OpKind::kMul, c, x), k);
  const ValueId y = body.binary(OpKind::kSub, c, x);
  auto region = std::make_shared<const ir::Program>(std::move(body).build({next, y}));
  ProgramBuilder b("scan");
  const ValueId c0 = b.add_parameter(t), xs = b.add_parameter(f32({length, 3})), kk = b.add_parameter(t);
  const std::vector<ValueId> out = ir::emit_siblings(b, OpKind::kScan, ir::scan_attrs({region, 1, 1, length, reverse, 0}),
                                                     std::vector<ValueId>{c0, xs, kk}, 2);
  return std::move(b).build({out[0], out[1]});
}

TEST(GpuControlFlow, ScanCarriesAndStacksForwardAndReversed) {
  SKIP_WITHOUT_GPU();
  for (int64_t length : {0, 1, 7}) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(absl::StrCat("length ", length, reverse ? " reversed" : ""));
      expect_same(scan_program(length, reverse),
                  {interesting_values(DType::kFloat32, 3, 20).reshaped({3}),
                   interesting_values(DType::kFloat32, 3 * length, 21).reshaped({length, 3}),
                   interesting_values(DType::kFloat32, 3, 22).reshaped({3})});
    }
  }
}

TEST(GpuControlFlow, CondTakesTheClampedBranch) {
  SKIP_WITHOUT_GPU();
  const AbstractValue t = f32({4});
  ProgramBuilder negate("negate");
  const ValueId a = negate.add_parameter(t);
  negate.add_parameter(t);
  auto branch0 = std::make_shared<const ir::Program>(std::move(negate).build({negate.unary(OpKind::kNeg, a)}));
  ir::CondConfig cfg{{branch0, step_body(t)}, {1, 1}, 0};
  ProgramBuilder b("cond");
  const ValueId index = b.add_parameter(AbstractValue{DType::kInt32, {}});
  const ValueId c = b.add_parameter(t), k = b.add_parameter(t);
  const std::vector<ValueId> out =
      ir::emit_siblings(b, OpKind::kCond, ir::cond_attrs(cfg), std::vector<ValueId>{index, c, k, k}, 1);
  const ir::Program program = std::move(b).build({out[0]});
  for (int32_t i : {-3, 0, 1, 9}) {
    SCOPED_TRACE(absl::StrCat("index ", i));
    expect_same(program, {Buffer::scalar<int32_t>(i), interesting_values(DType::kFloat32, 4, 23).reshaped({4}),
                          interesting_values(DType::kFloat32, 4, 24).reshaped({4})});
  }
}

TEST(GpuControlFlow, AWhileInsideAScanAndASerialisedExecutable) {
  SKIP_WITHOUT_GPU();
  // scan body (c, x) -> (while(c * x), c): a loop per iteration.
  const AbstractValue t = f32({4});
  ProgramBuilder body("outer_body");
  const ValueId c = body.add_parameter(t), x = body.add_parameter(t);
  const ValueId start = body.binary(OpKind::kMul, c, x);
  const std::vector<ValueId> looped = ir::emit_siblings(body, OpKind::kWhile, ir::while_attrs({below(t, 50.0), step_body(t), 1, 1, 0}),
                                                        std::vector<ValueId>{start, x, x}, 1);
  auto region = std::make_shared<const ir::Program>(std::move(body).build({looped[0], c}));
  ProgramBuilder b("nested");
  const ValueId c0 = b.add_parameter(t), xs = b.add_parameter(f32({5, 4}));
  const std::vector<ValueId> out =
      ir::emit_siblings(b, OpKind::kScan, ir::scan_attrs({region, 1, 1, 5, false, 0}), std::vector<ValueId>{c0, xs}, 2);
  const ir::Program program = std::move(b).build({out[0], out[1]});
  const Buffer c_init = Buffer::from_vector<float>({0.5f, 1.0f, 0.25f, 2.0f}, {4});
  const Buffer xs_value = Buffer::from_vector<float>(std::vector<float>(20, 1.25f), {5, 4});
  expect_same(program, {c_init, xs_value});

  // Serialised and read back: the regions' executables travel with it.
  Platform& cuda = platform("cuda");
  absl::StatusOr<std::shared_ptr<const Executable>> exe = cuda.compile(program);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::string> bytes = (*exe)->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::shared_ptr<const Executable>> back = cuda.deserialize(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  std::vector<std::shared_ptr<const DeviceBuffer>> held = {cuda.from_host(c_init, 0).value(), cuda.from_host(xs_value, 0).value()};
  const DeviceBuffer* args[] = {held[0].get(), held[1].get()};
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> first = (*exe)->execute(args, nullptr);
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> second = (*back)->execute(args, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(cuda.to_host(*(*first)[r]).value().bitwise_equal(cuda.to_host(*(*second)[r]).value()));
  }
}

TEST(GpuDebugPrint, PrintsTheDevicesValuesAsTheCpuDoes) {
  SKIP_WITHOUT_GPU();
  ProgramBuilder b("print");
  const ValueId x = b.add_parameter(f32({2, 2}));
  const ValueId y = b.binary(OpKind::kMul, x, x);
  b.emit_or_throw(OpKind::kDebugPrint, {x, y}, ir::debug_print_attrs("x={} x*x={}", -1));
  const ir::Program program = std::move(b).build({y});
  std::vector<std::string> lines;
  const DebugPrintSink previous = set_debug_print_sink([&](std::string_view line) { lines.emplace_back(line); });
  const Buffer value = Buffer::from_vector<float>({0.0f, 1.0f, -2.0f, 0.5f}, {2, 2});
  expect_same(program, {value});
  set_debug_print_sink(previous);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], lines[1]);  // the GPU's line, then the CPU's
  EXPECT_NE(lines[0].find("x=[[0, 1], [-2, 0.5]]"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace mcx::test
