// Rematerialisation in reverse mode (ir/remat.h): which values lie in a region, that the gradient program
// recomputes them (and common-subexpression elimination keeps the copies apart), and that gradients are
// bitwise those of the program without regions.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/remat.h"
#include "mcx/ir/shape_rules.h"
#include "tests/ir/ir_test_util.h"
#include "tests/support/reference_eval.h"

namespace mcx::test {
namespace {

using ir::ProgramBuilder;

// Marks v with a remat barrier of the given region and role when `marked`; v itself otherwise.
ValueId mark(ProgramBuilder& b, bool marked, ValueId v, int64_t region, int64_t role) {
  return marked ? b.emit_or_throw(OpKind::kRematBarrier, {v}, ir::remat_barrier_attrs(region, role)) : v;
}

// loss(x, w) = sum(o * o), o = region(tanh(x @ w) * column sums of exp(w)): exp(w) and its sums are computed
// inside the region from the outside value w alone (as a closed-over value would be): not members.
struct LayerIds {
  ValueId xi, wi, z, t, e, a, o, loss;
};
Program layer_loss(bool marked, LayerIds* ids = nullptr) {
  ProgramBuilder b("layer");
  LayerIds v{};
  ValueId x = b.add_parameter(f64({4, 3}));
  ValueId w = b.add_parameter(f64({3, 3}));
  v.xi = mark(b, marked, x, 0, ir::kRematInput);
  v.wi = mark(b, marked, w, 0, ir::kRematInput);
  v.z = b.emit_or_throw(OpKind::kDotGeneral, {v.xi, v.wi},
                        {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
  v.t = b.unary(OpKind::kTanh, v.z);
  v.e = b.unary(OpKind::kExp, w);
  ValueId column_sums = b.emit_or_throw(OpKind::kReduceSum, {v.e}, {{"dimensions", V{0}}});
  v.a = b.binary(OpKind::kMul, v.t, b.broadcast_in_dim(column_sums, concrete_shape({4, 3}), {1}));
  v.o = mark(b, marked, v.a, 0, ir::kRematOutput);
  v.loss = b.emit_or_throw(OpKind::kReduceSum, {b.binary(OpKind::kMul, v.o, v.o)}, {{"dimensions", V{0, 1}}});
  if (ids) *ids = v;
  return std::move(b).build({v.loss});
}

std::vector<Buffer> eval(const Program& p, const std::vector<Buffer>& args) {
  auto out = reference_evaluate(p, args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Buffer>{};
}

void expect_bitwise_equal(const std::vector<Buffer>& a, const std::vector<Buffer>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_doubles(), b[i].to_doubles()) << "result " << i;
}

TEST(Remat, RegionMembersAreWhatTheRegionComputesFromItsInputs) {
  LayerIds v;
  Program f = layer_loss(true, &v);
  std::vector<int64_t> region = ir::internal::remat_region_of_values(f);
  ASSERT_EQ(region.size(), static_cast<size_t>(f.num_values()));
  for (ValueId member : {v.xi, v.wi, v.z, v.t, v.a}) EXPECT_EQ(region[member], 0) << "%" << member;
  // The parameters, exp(w) (from an outside value alone), the region's output and what follows it.
  for (ValueId outside : {ValueId{0}, ValueId{1}, v.e, v.o, v.loss}) EXPECT_EQ(region[outside], -1) << "%" << outside;
}

TEST(Remat, GradientRecomputesTheRegionAndMatchesBitForBit) {
  Program plain = layer_loss(false), marked = layer_loss(true);
  auto g_plain = ir::value_and_grad_program(plain, {0, 1});
  auto g_marked = ir::value_and_grad_program(marked, {0, 1});
  ASSERT_TRUE(g_plain.ok()) << g_plain.status();
  ASSERT_TRUE(g_marked.ok()) << g_marked.status();
  const std::vector<Buffer> args = {rnd({4, 3}, 1), rnd({3, 3}, 2)};
  expect_bitwise_equal(eval(*g_marked, args), eval(*g_plain, args));

  // After CSE and DCE (what jit runs), the marked gradient still computes tanh and the matmul twice: once
  // forward, once from role-2 barriers in the backward pass; exp(w), outside the region, once.
  Program plain_opt = ir::eliminate_dead_code(ir::eliminate_common_subexpressions(*g_plain));
  Program marked_opt = ir::eliminate_dead_code(ir::eliminate_common_subexpressions(*g_marked));
  EXPECT_EQ(count_ops(plain_opt, OpKind::kTanh), 1);
  EXPECT_EQ(count_ops(marked_opt, OpKind::kTanh), 2);
  EXPECT_EQ(count_ops(marked_opt, OpKind::kDotGeneral), count_ops(plain_opt, OpKind::kDotGeneral) + 1);
  EXPECT_EQ(count_ops(marked_opt, OpKind::kExp), 1);
  int recomputed_inputs = 0;
  for (const ir::Instr& in : marked_opt.instrs) {
    if (in.kind == OpKind::kRematBarrier && *in.attrs.get_int("role") == ir::kRematRecomputedInput) ++recomputed_inputs;
  }
  EXPECT_EQ(recomputed_inputs, 2);  // x and w
  // The recomputation comes after the forward pass: the first role-2 barrier follows the loss (the scalar
  // reduce_sum).
  int loss_at = -1, first_recomputed = -1;
  for (int i = 0; i < static_cast<int>(marked_opt.instrs.size()); ++i) {
    const ir::Instr& in = marked_opt.instrs[i];
    if (in.kind == OpKind::kReduceSum && in.type.rank() == 0 && loss_at < 0) loss_at = i;
    if (in.kind == OpKind::kRematBarrier && *in.attrs.get_int("role") == ir::kRematRecomputedInput &&
        first_recomputed < 0) {
      first_recomputed = i;
    }
  }
  EXPECT_GT(first_recomputed, loss_at);
  EXPECT_GE(loss_at, 0);
  expect_bitwise_equal(eval(marked_opt, args), eval(*g_plain, args));
}

// sin inside an outer region, cos inside an inner one nested in it; the inner output is used by the outer.
Program nested(bool marked) {
  ProgramBuilder b("nested");
  ValueId x = b.add_parameter(f64({5}));
  ValueId xi = mark(b, marked, x, 0, ir::kRematInput);
  ValueId t = b.unary(OpKind::kSin, xi);
  ValueId ti = mark(b, marked, t, 1, ir::kRematInput);
  ValueId u = mark(b, marked, b.unary(OpKind::kCos, ti), 1, ir::kRematOutput);
  ValueId v = mark(b, marked, b.binary(OpKind::kMul, u, t), 0, ir::kRematOutput);
  return std::move(b).build({b.emit_or_throw(OpKind::kReduceSum, {b.binary(OpKind::kMul, v, v)}, {{"dimensions", V{0}}})});
}

TEST(Remat, NestedRegions) {
  Program f = nested(true);
  std::vector<int64_t> region = ir::internal::remat_region_of_values(f);
  std::vector<int64_t> by_kind;
  for (int i = 0; i < static_cast<int>(f.instrs.size()); ++i) by_kind.push_back(region[f.num_params() + i]);
  // xi sin ti cos u(out of 1: back in 0) mul v(out of 0) mul reduce_sum
  EXPECT_EQ(by_kind, (std::vector<int64_t>{0, 0, 1, 1, 0, 0, -1, -1, -1}));
  auto g_plain = ir::value_and_grad_program(nested(false), {0});
  auto g_marked = ir::value_and_grad_program(f, {0});
  ASSERT_TRUE(g_marked.ok()) << g_marked.status();
  const std::vector<Buffer> args = {rnd({5}, 3)};
  expect_bitwise_equal(eval(*g_marked, args), eval(*g_plain, args));
  // One more sin and cos than the plain gradient (whose VJP rules already emit a cos and a sin): the
  // recomputation of each region, once, although the inner one is needed inside the outer's recomputation.
  Program opt = ir::eliminate_dead_code(ir::eliminate_common_subexpressions(*g_marked));
  Program opt_plain = ir::eliminate_dead_code(ir::eliminate_common_subexpressions(*g_plain));
  EXPECT_EQ(count_ops(opt, OpKind::kSin), count_ops(opt_plain, OpKind::kSin) + 1);
  EXPECT_EQ(count_ops(opt, OpKind::kCos), count_ops(opt_plain, OpKind::kCos) + 1);
  // Differentiating the gradient again (grad of grad) works and agrees with the plain program's to rounding:
  // the second backward pass sums the cotangents of a forward value and of its recomputed copy separately,
  // so the additions associate differently.
  auto gg_plain = ir::vjp_program(*g_plain, {0});
  auto gg_marked = ir::vjp_program(*g_marked, {0});
  ASSERT_TRUE(gg_marked.ok()) << gg_marked.status();
  std::vector<Buffer> args2 = {rnd({5}, 3), Buffer::scalar<double>(0.5), rnd({5}, 4)};
  std::vector<Buffer> want = eval(gg_plain.value(), args2), got = eval(*gg_marked, args2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::vector<double> g = got[i].to_doubles(), w = want[i].to_doubles();
    ASSERT_EQ(g.size(), w.size());
    for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], w[k], 1e-13 * (1 + std::fabs(w[k]))) << i << "," << k;
  }
}

TEST(Remat, BarrierIsTheIdentityEverywhere) {
  // The per-op checks every differentiable op gets: VJP and JVP against finite differences, vmap against a
  // loop over examples.
  for (int64_t role : {ir::kRematInput, ir::kRematOutput, ir::kRematRecomputedInput}) {
    ProgramBuilder b("barrier");
    ValueId x = b.add_parameter(f64({2, 3}));
    Program f = std::move(b).build({b.emit_or_throw(OpKind::kRematBarrier, {x}, ir::remat_barrier_attrs(7, role))});
    check_vjp(f, {rnd({2, 3}, 5)}, {0}, 11);
    expect_bitwise_equal(eval(f, {rnd({2, 3}, 6)}), {rnd({2, 3}, 6)});
  }
}

TEST(Remat, RenumberingKeepsRegionsApart) {
  Program f = nested(true);
  EXPECT_EQ(ir::count_remat_regions(f), 2);
  Program g = ir::renumber_remat_regions(f, 40);
  std::vector<int64_t> regions;
  for (const ir::Instr& in : g.instrs) {
    if (in.kind == OpKind::kRematBarrier) regions.push_back(*in.attrs.get_int("region"));
  }
  EXPECT_EQ(regions, (std::vector<int64_t>{40, 41, 41, 40}));
}

TEST(Remat, BadAttributesAreNamed) {
  const AbstractValue x = f64({2});
  auto bad_role = ir::infer_type(OpKind::kRematBarrier, std::vector<AbstractValue>{x}, ir::remat_barrier_attrs(0, 3), {});
  EXPECT_THAT(bad_role.status().message(), testing::HasSubstr("attribute 'role' is 3, expected 0 (input), 1 (output) or 2"));
  auto bad_region = ir::infer_type(OpKind::kRematBarrier, std::vector<AbstractValue>{x}, ir::remat_barrier_attrs(-1, 0), {});
  EXPECT_THAT(bad_region.status().message(), testing::HasSubstr("attribute 'region' is -1, expected >= 0"));
  auto missing = ir::infer_type(OpKind::kRematBarrier, std::vector<AbstractValue>{x}, ir::Attrs{{"role", int64_t{0}}}, {});
  EXPECT_THAT(missing.status().message(), testing::HasSubstr("region"));
}

}  // namespace
}  // namespace mcx::test
