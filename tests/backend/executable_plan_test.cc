// The planner's phases (executable_plan.h), each on its own: what one phase adds to a plan of a small program
// whose plan is known by hand. (Whole executables against the reference evaluator: fusion_test.cc,
// row_fusion_test.cc and the op tests.)
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/executable_plan.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/spmd_rules.h"
#include "tests/ir/ir_test_programs.h"

namespace mcx::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ir::OpKind;
using ir::ValueId;
using Plan = CpuExecutable::Plan;
using Ints = std::vector<int64_t>;

AbstractValue f32(const Ints& dims) { return {DType::kFloat32, concrete_shape(dims)}; }

// A plan of p through phase 2 (facts), the input of every later phase.
Plan facts_of(const ir::Program& p) {
  Plan plan;
  plan.program = p;
  throw_if_error(fill_program_facts(plan));
  return plan;
}

// Through phase 4 (fusion groups and schedule).
Plan scheduled(const ir::Program& p, FusionGroups* fusion_out = nullptr) {
  Plan plan = facts_of(p);
  FusionGroups fusion = value_or_throw(form_fusion_groups(plan));
  throw_if_error(schedule_steps(plan, fusion));
  if (fusion_out != nullptr) *fusion_out = std::move(fusion);
  return plan;
}

std::vector<Plan::StepKind> kinds(const std::vector<Plan::Step>& steps) {
  std::vector<Plan::StepKind> k;
  for (const Plan::Step& st : steps) k.push_back(st.kind);
  return k;
}

// x -> a = exp(x), b = a * x (one group) -> r = reduce_sum(b) closes it -> c = -a (a new group: a's is closed).
struct TwoGroups {
  ir::Program program;
  ValueId x, a, b, r, c;
};
TwoGroups two_groups() {
  ir::ProgramBuilder bld("two_groups");
  TwoGroups t;
  t.x = bld.add_parameter(f32({4, 8}));
  t.a = bld.unary(OpKind::kExp, t.x);
  t.b = bld.binary(OpKind::kMul, t.a, t.x);
  t.r = bld.reduce_sum(t.b, {1});
  t.c = bld.unary(OpKind::kNeg, t.a);
  t.program = std::move(bld).build({t.r, t.c});
  return t;
}

TEST(PlanPhases, ProgramForPlanKeepsAPlainProgramAndRefusesAShardMap) {
  const TwoGroups t = two_groups();
  absl::StatusOr<ir::Program> kept = program_for_plan(t.program);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->instrs.size(), t.program.instrs.size());
  EXPECT_EQ(kept->results, t.program.results);

  const ir::Program sm = value_or_throw(ir::specialize(ir::testing_programs::shard_map_program(), {{"b", 3}}));
  absl::StatusOr<ir::Program> refused = program_for_plan(sm);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("holds a shard_map over a mesh of shape [2, 2]"));
}

TEST(PlanPhases, FillProgramFactsGivesDimsAndConstantsAndRefusesSymbolicShapes) {
  ir::ProgramBuilder bld("facts");
  const ValueId x = bld.add_parameter(f32({3}));
  const ValueId k = bld.constant(Buffer::from_vector<float>({1, 2, 3}, {3}));
  const ValueId y = bld.binary(OpKind::kAdd, x, k);
  const Plan plan = facts_of(std::move(bld).build({y}));
  EXPECT_EQ(plan.dims[x], Ints{3});
  EXPECT_EQ(plan.dims[y], Ints{3});
  ASSERT_EQ(plan.constants.size(), 1u);
  EXPECT_EQ(plan.constants.begin()->first, k);
  EXPECT_EQ(plan.constants.begin()->second.to_doubles(), (std::vector<double>{1, 2, 3}));

  ir::ProgramBuilder sym("sym");
  const ValueId s = sym.add_parameter({DType::kFloat32, symbolic_shape("b, 4")});
  const ValueId e = sym.unary(OpKind::kExp, s);
  Plan symbolic;
  symbolic.program = std::move(sym).build({e});
  const absl::Status st = fill_program_facts(symbolic);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("specialise the program to concrete shapes first"));
}

TEST(PlanPhases, FusionGroupsCloseWhenAValueIsReadOutside) {
  const TwoGroups t = two_groups();
  const Plan plan = facts_of(t.program);
  const FusionGroups f = value_or_throw(form_fusion_groups(plan));
  ASSERT_EQ(f.members.size(), 2u);
  EXPECT_THAT(f.members[0], ElementsAre(t.a, t.b));
  EXPECT_THAT(f.members[1], ElementsAre(t.c));
  EXPECT_EQ(f.group_of[t.x], -1);
  EXPECT_EQ(f.group_of[t.r], -1);
  EXPECT_EQ(f.group_of[t.c], 1);
  EXPECT_TRUE(f.escapes[t.a]);  // read by c, in the other group
  EXPECT_TRUE(f.escapes[t.b]);  // read by the reduction
  EXPECT_TRUE(f.escapes[t.c]);  // a result
  EXPECT_FALSE(f.escapes[t.x]);
}

TEST(PlanPhases, FusionGroupsDoNotJoinValuesOfOtherDims) {
  ir::ProgramBuilder bld("dims");
  const ValueId x = bld.add_parameter(f32({4, 8}));
  const ValueId row = bld.add_parameter(f32({8}));
  const ValueId e = bld.unary(OpKind::kExp, x);
  const ValueId n = bld.unary(OpKind::kNeg, row);  // [8]: a group of its own
  const ValueId nb = bld.broadcast_in_dim(n, concrete_shape({4, 8}), {1});
  const ValueId y = bld.binary(OpKind::kAdd, e, nb);  // joins e's group (same dims, still open)
  const Plan plan = facts_of(std::move(bld).build({y}));
  const FusionGroups f = value_or_throw(form_fusion_groups(plan));
  ASSERT_EQ(f.members.size(), 2u);
  EXPECT_THAT(f.members[0], ElementsAre(e, y));
  EXPECT_THAT(f.members[1], ElementsAre(n));
  EXPECT_FALSE(f.escapes[e]);
  EXPECT_TRUE(f.escapes[n]);  // read by the broadcast
}

TEST(PlanPhases, ScheduleStepsPlacesEachGroupAtItsLastMember) {
  const TwoGroups t = two_groups();
  const Plan plan = scheduled(t.program);
  EXPECT_THAT(kinds(plan.steps), ElementsAre(Plan::StepKind::kFused, Plan::StepKind::kOp, Plan::StepKind::kFused));
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.steps[0].group, 0);
  EXPECT_EQ(plan.steps[1].value, t.r);
  EXPECT_EQ(std::get<step_attrs::Axes>(plan.steps[1].attrs).dimensions, Ints{1});
  EXPECT_EQ(plan.steps[2].group, 1);
  // Group 0: leaf x; nodes exp(leaf 0) and mul(node a, leaf 0); both members escape.
  const Plan::GroupPlan& g0 = plan.groups[0];
  EXPECT_THAT(g0.leaves, ElementsAre(t.x));
  EXPECT_THAT(g0.outputs, ElementsAre(t.a, t.b));
  ASSERT_EQ(g0.group.nodes.size(), 2u);
  EXPECT_EQ(g0.group.nodes[0].kind, OpKind::kExp);
  EXPECT_THAT(g0.group.nodes[0].args, ElementsAre(0));
  EXPECT_THAT(g0.group.nodes[1].args, ElementsAre(1, 0));
  EXPECT_EQ(g0.group.dims, (Ints{4, 8}));
  EXPECT_THAT(plan.groups[1].leaves, ElementsAre(t.a));
  EXPECT_THAT(plan.groups[1].outputs, ElementsAre(t.c));
}

TEST(PlanPhases, ScheduleStepsMakesViewsAndSkipsConstants) {
  ir::ProgramBuilder bld("views");
  const ValueId x = bld.add_parameter(f32({2, 3}));
  const ValueId k = bld.constant(Buffer::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  const ValueId t = bld.transpose(x, {1, 0});
  const ValueId d = bld.emit_or_throw(OpKind::kCumsum, {t}, {{"dimension", int64_t{0}}, {"reverse", int64_t{1}}});
  const ValueId y = bld.binary(OpKind::kMul, d, k);
  const Plan plan = scheduled(std::move(bld).build({y}));
  EXPECT_THAT(kinds(plan.steps), ElementsAre(Plan::StepKind::kView, Plan::StepKind::kOp, Plan::StepKind::kFused));
  EXPECT_EQ(plan.steps[0].value, t);
  EXPECT_EQ(std::get<step_attrs::Transpose>(plan.steps[0].attrs).permutation, (Ints{1, 0}));
  const auto& cumsum = std::get<step_attrs::Cumsum>(plan.steps[1].attrs);
  EXPECT_EQ(cumsum.dimension, 0);
  EXPECT_TRUE(cumsum.reverse);
  EXPECT_THAT(plan.groups[0].leaves, ElementsAre(d, k));
}

// Softmax over rows: reduce_max, exp(x - max), reduce_sum, divide: one row region holding all of it.
ir::Program softmax(ValueId* x_out, ValueId* y_out) {
  ir::ProgramBuilder b("softmax");
  const ValueId x = b.add_parameter(f32({50, 1030}));
  const ValueId mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{1}}});
  const ValueId mb = b.broadcast_in_dim(mx, concrete_shape({50, 1030}), {0});
  const ValueId e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, x, mb));
  const ValueId s = b.reduce_sum(e, {1});
  const ValueId sb = b.broadcast_in_dim(s, concrete_shape({50, 1030}), {0});
  const ValueId y = b.binary(OpKind::kDiv, e, sb);
  *x_out = x;
  *y_out = y;
  return std::move(b).build({y});
}

TEST(PlanPhases, RowRegionsTakeASoftmaxWhole) {
  ValueId x, y;
  Plan plan = scheduled(softmax(&x, &y));
  const size_t before = plan.steps.size();
  form_row_regions(plan);
  ASSERT_EQ(plan.regions.size(), 1u);
  EXPECT_THAT(kinds(plan.steps), ElementsAre(Plan::StepKind::kRowRegion));
  const Plan::RowRegion& rg = plan.regions[0];
  EXPECT_EQ(rg.steps.size(), before);
  EXPECT_EQ(rg.rows, 50);
  EXPECT_THAT(rg.reads, ElementsAre(x));
  EXPECT_THAT(rg.escaping, ElementsAre(y));
  EXPECT_GE(rg.max_block_rows, 1);
  EXPECT_GT(rg.local_row_bytes, 0);  // the maxima, exponentials and sums live only inside a block
  EXPECT_THAT(step_reads(plan, plan.steps[0]), ElementsAre(x));
}

TEST(PlanPhases, RowRegionsNeedAReductionAndAGroup) {
  // Both groups and the row-wise reduction between them share the 4 rows: one region; only the results
  // leave it (a and b live in per-block storage).
  const TwoGroups t = two_groups();
  Plan plan = scheduled(t.program);
  form_row_regions(plan);
  ASSERT_EQ(plan.regions.size(), 1u);
  EXPECT_THAT(kinds(plan.steps), ElementsAre(Plan::StepKind::kRowRegion));
  EXPECT_EQ(plan.regions[0].steps.size(), 3u);
  EXPECT_THAT(plan.regions[0].escaping, UnorderedElementsAre(t.r, t.c));
  EXPECT_THAT(plan.regions[0].reads, ElementsAre(t.x));

  ir::ProgramBuilder bld("no_reduction");
  const ValueId x = bld.add_parameter(f32({4, 8}));
  const ValueId e = bld.unary(OpKind::kExp, x);
  Plan plain = scheduled(std::move(bld).build({e}));
  form_row_regions(plain);
  EXPECT_TRUE(plain.regions.empty());
  EXPECT_THAT(kinds(plain.steps), ElementsAre(Plan::StepKind::kFused));
}

TEST(PlanPhases, ReleasesDropAViewsStorageAfterItsLastReader) {
  ir::ProgramBuilder bld("live");
  const ValueId x = bld.add_parameter(f32({4, 8}));
  const ValueId a = bld.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{1}}, {"reverse", int64_t{0}}});
  const ValueId t = bld.transpose(a, {1, 0});
  const ValueId r = bld.reduce_sum(t, {1});
  const ValueId q = bld.emit_or_throw(OpKind::kCumsum, {r}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  FusionGroups fusion;
  Plan plan = scheduled(std::move(bld).build({q, r}), &fusion);
  ASSERT_THAT(kinds(plan.steps),
              ElementsAre(Plan::StepKind::kOp, Plan::StepKind::kView, Plan::StepKind::kOp, Plan::StepKind::kOp));
  const Liveness live = plan_releases(plan, fusion);
  EXPECT_EQ(live.root[t], a);
  EXPECT_EQ(live.last_use[a], 2);  // the reduction reads t, a view of a
  EXPECT_THAT(plan.steps[0].release, ElementsAre(x));
  EXPECT_TRUE(plan.steps[1].release.empty());
  EXPECT_THAT(plan.steps[2].release, UnorderedElementsAre(a, t));
  EXPECT_TRUE(plan.steps[3].release.empty());  // r is a result: pinned, never released
  EXPECT_TRUE(live.pinned[r]);
  EXPECT_TRUE(live.pinned[q]);
  EXPECT_FALSE(live.pinned[a]);
}

TEST(PlanPhases, InPlaceReuseTakesOnlyADyingTemporaryOfTheSameType) {
  ir::ProgramBuilder bld("inplace");
  const ValueId x = bld.add_parameter(f32({16}));
  const ValueId s = bld.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  const ValueId y = bld.binary(OpKind::kMul, bld.unary(OpKind::kExp, s), x);  // s dies here; x is an argument
  FusionGroups fusion;
  Plan plan = scheduled(std::move(bld).build({y}), &fusion);
  plan_inplace_reuse(plan, plan_releases(plan, fusion));
  ASSERT_EQ(plan.groups.size(), 1u);
  const Plan::GroupPlan& g = plan.groups[0];
  ASSERT_THAT(g.leaves, ElementsAre(s, x));
  EXPECT_THAT(g.inplace_leaf, ElementsAre(0));  // s's storage, never the argument's

  // The same temporary also a result: pinned, so the group writes fresh storage.
  ir::ProgramBuilder pinned("pinned");
  const ValueId px = pinned.add_parameter(f32({16}));
  const ValueId ps = pinned.emit_or_throw(OpKind::kCumsum, {px}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  const ValueId py = pinned.unary(OpKind::kExp, ps);
  Plan p2 = scheduled(std::move(pinned).build({py, ps}), &fusion);
  plan_inplace_reuse(p2, plan_releases(p2, fusion));
  EXPECT_THAT(p2.groups[0].inplace_leaf, ElementsAre(-1));

  // Another dtype: no reuse.
  ir::ProgramBuilder conv("convert");
  const ValueId cx = conv.add_parameter(f32({16}));
  const ValueId cs = conv.emit_or_throw(OpKind::kCumsum, {cx}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  const ValueId cy = conv.convert(cs, DType::kFloat64);
  Plan p3 = scheduled(std::move(conv).build({cy}), &fusion);
  plan_inplace_reuse(p3, plan_releases(p3, fusion));
  EXPECT_THAT(p3.groups[0].inplace_leaf, ElementsAre(-1));
}

TEST(PlanPhases, NoteCollectivesFindsAnSpmdOp) {
  Plan plain = scheduled(two_groups().program);
  note_collectives(plain);
  EXPECT_FALSE(plain.has_collectives);

  ir::ProgramBuilder bld("spmd");
  const ValueId x = bld.add_parameter(f32({4}));
  const ValueId r = bld.emit_or_throw(OpKind::kAllReduce, {x}, ir::all_reduce_attrs(ReduceOp::kSum, {0, 1}, 2));
  Plan spmd = scheduled(std::move(bld).build({r}));
  note_collectives(spmd);
  EXPECT_TRUE(spmd.has_collectives);
}

TEST(PlanPhases, GenerateKernelsTakesGroupsOfAtLeastTwoNodesWhenEnabled) {
  ir::ProgramBuilder bld("kernels");
  const ValueId x = bld.add_parameter(f32({64}));
  const ValueId one = bld.unary(OpKind::kExp, x);  // one node: below the generator's minimum
  const ValueId s = bld.emit_or_throw(OpKind::kCumsum, {one}, {{"dimension", int64_t{0}}, {"reverse", int64_t{0}}});
  const ValueId two = bld.unary(OpKind::kTanh, bld.binary(OpKind::kMul, s, s));
  const ir::Program program = std::move(bld).build({two});
  for (bool enabled : {false, true}) {
    SCOPED_TRACE(enabled ? "generation on" : "generation off");
    const bool saved = codegen::enabled();
    codegen::set_enabled(enabled);
    Plan plan = scheduled(program);
    generate_kernels(plan);
    codegen::set_enabled(saved);
    ASSERT_EQ(plan.groups.size(), 2u);
    EXPECT_EQ(plan.groups[0].group.kernel, nullptr);
    // On: a kernel for the two-node group, unless this build has no code generator (then enabled() stays false).
    EXPECT_EQ(plan.groups[1].group.kernel != nullptr, enabled && codegen::built_with_llvm());
  }
}

TEST(PlanPhases, PlanProgramRunsEveryPhase) {
  ValueId x, y;
  const ir::Program program = softmax(&x, &y);
  std::unique_ptr<Plan> plan = value_or_throw(plan_program(program));
  EXPECT_EQ(plan->program.instrs.size(), program.instrs.size());
  EXPECT_EQ(plan->dims[y], (Ints{50, 1030}));
  EXPECT_EQ(plan->regions.size(), 1u);
  EXPECT_THAT(kinds(plan->steps), ElementsAre(Plan::StepKind::kRowRegion));
  EXPECT_THAT(plan->steps[0].release, ElementsAre(x));
  EXPECT_FALSE(plan->has_collectives);
  // sub+exp, then the division: both inside the region (in-place reuse is for top-level groups only).
  ASSERT_EQ(plan->groups.size(), 2u);
  for (const Plan::GroupPlan& g : plan->groups) EXPECT_TRUE(g.inplace_leaf.empty());
}

}  // namespace
}  // namespace mcx::cpu
