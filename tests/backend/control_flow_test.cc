// The control-flow ops of opset 7 at the IR level: shape rules and their errors (built by hand, as a
// corrupt or hand-written program would be), sibling instructions, the fingerprint, required opset,
// specialisation into regions, and execution on the CPU backend against the reference evaluator.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shape_rules.h"
#include "tests/ir/ir_test_programs.h"
#include "mcx/ir/text.h"
#include "tests/ir/ir_test_util.h"
#include "tests/support/reference_eval.h"

namespace mcx::test {
namespace {

using ir::Attrs;
using ir::ProgramBuilder;
using testing::HasSubstr;

AbstractValue f32(V dims) { return {DType::kFloat32, concrete_shape(dims)}; }
AbstractValue boolean() { return {DType::kBool, {}}; }

// (c: f32[n], k: f32[n]) -> c * k
std::shared_ptr<const Program> scale_body(AbstractValue t) {
  ProgramBuilder b("body");
  ValueId c = b.add_parameter(t);
  ValueId k = b.add_parameter(t);
  ValueId r = b.binary(OpKind::kMul, c, k);
  return std::make_shared<const Program>(std::move(b).build({r}));
}

// (c: f32[n], k: f32[n]) -> sum(c) < 100
std::shared_ptr<const Program> below_100(AbstractValue t) {
  ProgramBuilder b("cond");
  ValueId c = b.add_parameter(t);
  b.add_parameter(t);
  ValueId s = b.reduce_sum(c, {0});
  ValueId lim = b.scalar_constant(DType::kFloat32, 100);
  ValueId r = b.binary(OpKind::kLt, s, lim);
  return std::make_shared<const Program>(std::move(b).build({r}));
}

std::string error(OpKind kind, std::vector<AbstractValue> ops, const Attrs& attrs) {
  auto t = ir::infer_type(kind, ops, attrs, SymbolicScope{});
  return t.ok() ? std::string("ok: ") + t->to_string() : std::string(t.status().message());
}

TEST(ControlFlowShapeRules, WhileChecksRegionsAgainstTheCarries) {
  const AbstractValue t = f32({3});
  ir::WhileConfig c{below_100(t), scale_body(t), 1, 1, 0};
  EXPECT_EQ(error(OpKind::kWhile, {t, t, t}, ir::while_attrs(c)), "ok: f32[3]");
  EXPECT_THAT(error(OpKind::kWhile, {f32({4}), t, t}, ir::while_attrs(c)),
              HasSubstr("[while] cond parameter 0 is f32[3], expected f32[4]"));
  c.cond = scale_body(t);  // returns f32[3], not bool[]
  EXPECT_THAT(error(OpKind::kWhile, {t, t, t}, ir::while_attrs(c)), HasSubstr("[while] cond must return one bool[], found (f32[3])"));
  c.cond = below_100(t);
  c.result = 1;
  EXPECT_THAT(error(OpKind::kWhile, {t, t, t}, ir::while_attrs(c)),
              HasSubstr("attribute 'result' is 1, expected a carry index in [0, 1)"));
  c.result = 0;
  c.num_cond_consts = 3;
  EXPECT_THAT(error(OpKind::kWhile, {t, t, t}, ir::while_attrs(c)),
              HasSubstr("attribute 'num_cond_consts' is 3, expected a count in [0, 2]"));
  Attrs missing = ir::while_attrs({below_100(t), scale_body(t), 1, 1, 0});
  missing.set("regions", ir::Regions{below_100(t)});
  EXPECT_THAT(error(OpKind::kWhile, {t, t, t}, missing), HasSubstr("attribute 'regions' holds 1 programs, expected 2"));
}

TEST(ControlFlowShapeRules, ScanStacksOutputsAndChecksTheLength) {
  const AbstractValue t = f32({3});
  // body(c, x, k) -> (c * x, c): carry f32[3], x f32[3] from xs f32[5,3], const k unused.
  ProgramBuilder b("body");
  ValueId c = b.add_parameter(t), x = b.add_parameter(t);
  b.add_parameter(f32({}));
  ValueId r = b.binary(OpKind::kMul, c, x);
  auto body = std::make_shared<const Program>(std::move(b).build({r, c}));
  ir::ScanConfig cfg{body, 1, 1, 5, false, 1};
  EXPECT_EQ(error(OpKind::kScan, {t, f32({5, 3}), f32({})}, ir::scan_attrs(cfg)), "ok: f32[5,3]");
  cfg.result = 0;
  EXPECT_EQ(error(OpKind::kScan, {t, f32({5, 3}), f32({})}, ir::scan_attrs(cfg)), "ok: f32[3]");
  EXPECT_THAT(error(OpKind::kScan, {t, f32({4, 3}), f32({})}, ir::scan_attrs(cfg)),
              HasSubstr("[scan] xs 0 is f32[4,3], expected a leading dimension of the length 5"));
  cfg.result = 2;
  EXPECT_THAT(error(OpKind::kScan, {t, f32({5, 3}), f32({})}, ir::scan_attrs(cfg)),
              HasSubstr("attribute 'result' is 2, expected a result index in [0, 2)"));
  cfg.result = 0;
  cfg.length = -1;
  EXPECT_THAT(error(OpKind::kScan, {t, f32({5, 3}), f32({})}, ir::scan_attrs(cfg)),
              HasSubstr("attribute 'length' is -1, expected >= 0"));
  cfg.length = 5;
  EXPECT_THAT(error(OpKind::kScan, {f32({2}), f32({5, 3}), f32({})}, ir::scan_attrs(cfg)),
              HasSubstr("[scan] body parameter 0 is f32[3], expected f32[2]"));
}

TEST(ControlFlowShapeRules, CondNeedsAnI32IndexAndBranchesOfEqualTypes) {
  const AbstractValue t = f32({3});
  ir::CondConfig cfg{{scale_body(t), scale_body(t)}, {1, 0}, 0};
  const AbstractValue idx{DType::kInt32, {}};
  // operands: index, shared operand (c), branch 0's const (k); branch 1 takes (c) alone -> mismatch.
  EXPECT_THAT(error(OpKind::kCond, {idx, t, t}, ir::cond_attrs(cfg)),
              HasSubstr("[cond] branch 1 takes 2 parameters (f32[3], f32[3]), expected 1 (f32[3])"));
  cfg.branch_consts = {1, 1};
  EXPECT_EQ(error(OpKind::kCond, {idx, t, t, t}, ir::cond_attrs(cfg)), "ok: f32[3]");
  EXPECT_THAT(error(OpKind::kCond, {boolean(), t, t, t}, ir::cond_attrs(cfg)),
              HasSubstr("[cond] the branch index must be i32[], found bool[]"));
  cfg.branches[1] = below_100(t);
  EXPECT_THAT(error(OpKind::kCond, {idx, t, t, t}, ir::cond_attrs(cfg)),
              HasSubstr("[cond] result 0: branch 1 returns bool[], branch 0 f32[3]"));
  cfg.branch_consts = {1};
  EXPECT_THAT(error(OpKind::kCond, {idx, t, t, t}, ir::cond_attrs(cfg)),
              HasSubstr("attribute 'branch_consts' has 1 entries, expected one per branch (2)"));
}

// (x: f32[3], k: f32[3]) -> while sum(x) < 100: x = x * k, with the two results of a 2-carry loop.
Program doubling_program() {
  const AbstractValue t = f32({3});
  ProgramBuilder b("main");
  ValueId x = b.add_parameter(t), k = b.add_parameter(t);
  // carries (x, k); cond and body take no constants.
  ProgramBuilder body("body");
  ValueId c0 = body.add_parameter(t), c1 = body.add_parameter(t);
  ValueId next = body.binary(OpKind::kMul, c0, c1);
  auto body_p = std::make_shared<const Program>(std::move(body).build({next, c1}));
  ir::WhileConfig cfg{below_100(t), body_p, 2, 0, 0};
  ValueId r0 = b.emit_or_throw(OpKind::kWhile, {x, k}, ir::while_attrs(cfg));
  cfg.result = 1;
  ValueId r1 = b.emit_or_throw(OpKind::kWhile, {x, k}, ir::while_attrs(cfg));
  return std::move(b).build({r0, r1});
}

TEST(ControlFlowProgram, TwoResultLoopOnTheCpuMatchesTheReference) {
  Program p = doubling_program();
  EXPECT_TRUE(ir::are_siblings(p.instrs[0], p.instrs[1]));
  EXPECT_EQ(ir::result_index(p.instrs[1]), 1);
  auto exe = cpu::CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<Buffer> args{Buffer::from_vector<float>({1, 2, 3}, {3}), Buffer::from_vector<float>({2, 2, 2}, {3})};
  auto got = (*exe)->execute(args);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = reference_evaluate(p, args);
  ASSERT_TRUE(want.ok()) << want.status();
  // 6 -> 12 -> 24 -> 48 -> 96 -> 192: five doublings.
  EXPECT_EQ((*got)[0].to_doubles(), (std::vector<double>{32, 64, 96}));
  EXPECT_EQ((*got)[0].to_doubles(), (*want)[0].to_doubles());
  EXPECT_EQ((*got)[1].to_doubles(), (*want)[1].to_doubles());
}

TEST(ControlFlowProgram, VerifyChecksEachRegionsBody) {
  Program p = doubling_program();
  Program broken_body = *ir::get_while_config(p.instrs[0].attrs, 2)->body;
  broken_body.instrs[0].operands = {0, 2};  // uses its own result: not defined before it
  auto body = std::make_shared<const Program>(broken_body);
  for (ir::Instr& in : p.instrs) in.attrs.set("regions", ir::Regions{below_100(f32({3})), body});
  auto s = ir::verify(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("region 1 (@body): [verify] instruction 0 (%2 = mul): operand %2 is not defined"));
  EXPECT_FALSE(cpu::CpuExecutable::compile(p).ok());
}

TEST(ControlFlowProgram, FingerprintSeesInsideRegionsAndOpsetIsSeven) {
  Program p = doubling_program();
  EXPECT_EQ(ir::required_opset(p), 7);
  Program q = p;
  const AbstractValue t = f32({3});
  ProgramBuilder body("body");
  ValueId c0 = body.add_parameter(t), c1 = body.add_parameter(t);
  ValueId next = body.binary(OpKind::kAdd, c0, c1);  // add instead of mul
  auto other = std::make_shared<const Program>(std::move(body).build({next, c1}));
  for (ir::Instr& in : q.instrs) in.attrs.set("regions", ir::Regions{below_100(t), other});
  ASSERT_TRUE(ir::verify(q).ok());
  EXPECT_NE(ir::fingerprint_hex(p), ir::fingerprint_hex(q));
  EXPECT_FALSE(ir::structurally_equal(p, q));
  // Equal regions held in distinct objects compare (and fingerprint) equal.
  Program r = doubling_program();
  EXPECT_TRUE(ir::structurally_equal(p, r));
  EXPECT_EQ(ir::fingerprint_hex(p), ir::fingerprint_hex(r));
  // Dead siblings go, live ones stay.
  Program one = p;
  one.results = {one.results[1]};
  EXPECT_EQ(count_ops(ir::eliminate_dead_code(one), OpKind::kWhile), 1);
  EXPECT_EQ(count_ops(ir::eliminate_common_subexpressions(p), OpKind::kWhile), 2);
}

TEST(ControlFlowProgram, SpecialisationReachesIntoRegions) {
  auto text = R"(program @main(%x: f32[b]) -> (f32[b]) where b >= 1 {
    %n = constant() {value=i32[]{3}} : i32[]
    %r = scan(%x) {length=3, num_carry=1, num_xs=0, regions=[program @body(%c: f32[b]) -> (f32[b]) where b >= 1 {
      %d = add(%c, %c) : f32[b]
      return (%d)
    }], result=0, reverse=0} : f32[b]
    return (%r)
  })";
  auto p = ir::parse_program(text);
  ASSERT_TRUE(p.ok()) << p.status();
  auto s = ir::specialize(*p, {{"b", 4}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->params[0].to_string(), "f32[4]");
  auto exe = cpu::CpuExecutable::compile(*s);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto got = (*exe)->execute(std::vector<Buffer>{Buffer::from_vector<float>({1, 2, 3, 4}, {4})});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].to_doubles(), (std::vector<double>{8, 16, 24, 32}));
  auto bad = ir::parse_program(R"(program @main(%x: f32[3]) -> (f32[3]) {
    %r = scan(%x) {length=3, num_carry=1, num_xs=0, regions=[program @body(%c: f32[3]) -> (f32[2]) {
      %d = slice(%c) {limit=dims[2], start=dims[0], strides=[1]} : f32[2]
      return (%d)
    }], result=0, reverse=0} : f32[3]
    return (%r)
  })");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("carry 0: body returns f32[2], the loop carries f32[3]"));
}

// A shard_map runs only partitioned on its mesh: the backend refuses it rather than run its body on one device.
TEST(ShardMapProgram, TheCpuBackendRefusesItUnpartitioned) {
  const ir::Program p = value_or_throw(ir::specialize(ir::testing_programs::shard_map_program(), {{"b", 3}}));
  auto e = cpu::CpuExecutable::compile(p);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), ::testing::HasSubstr("holds a shard_map over a mesh of shape [2, 2]"));
}

}  // namespace
}  // namespace mcx::test
