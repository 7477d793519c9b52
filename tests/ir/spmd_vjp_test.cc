// VJP rules of the SPMD ops against central finite differences over all partitions at once, evaluated
// by spmd_reference in float64: for F(x_0..x_{N-1}) = sum_d <ct_d, f(x)_d>, the VJP program run on
// partition d must return dF/dx_d (op.h's pmap convention). Each case also checks the JVP rules (forward.h) and
// the batching rules (batching.h).
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/spmd_rules.h"
#include "tests/support/spmd_reference.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::Attrs;
using ir::OpKind;
using ir::Program;
using ir::ValueId;
using V = std::vector<int64_t>;

std::vector<int64_t> iota(int n) {
  std::vector<int64_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// f(x) = sin(op(x * x + x)): a nonlinearity on both sides so that a wrong rule cannot pass by symmetry.
Program around(OpKind k, V dims, Attrs attrs) {
  ir::ProgramBuilder b("f");
  ValueId x = b.add_parameter(AbstractValue{DType::kFloat64, concrete_shape(dims)});
  ValueId y = b.binary(OpKind::kAdd, b.binary(OpKind::kMul, x, x), x);
  ValueId z = b.emit_or_throw(k, {y}, std::move(attrs));
  ValueId r = b.unary(OpKind::kSin, z);
  return std::move(b).build({r});
}

double objective(const Program& f, int n, const std::vector<std::vector<Buffer>>& args,
                 const std::vector<Buffer>& cts) {
  auto out = value_or_throw(spmd_reference_evaluate(f, n, args));
  double s = 0;
  for (int p = 0; p < n; ++p) {
    std::vector<double> z = out[p][0].to_doubles(), c = cts[p].to_doubles();
    for (size_t k = 0; k < z.size(); ++k) s += z[k] * c[k];
  }
  return s;
}

void check_spmd_vjp(const Program& f, int n, uint64_t seed) {
  ASSERT_TRUE(ir::verify(f).ok()) << ir::verify(f);
  auto vjp = ir::vjp_program(f, {0});
  ASSERT_TRUE(vjp.ok()) << vjp.status();
  ASSERT_TRUE(ir::verify(*vjp).ok()) << ir::verify(*vjp);
  V xdims = value_or_throw(to_concrete(f.params[0].shape));
  V zdims = value_or_throw(to_concrete(f.type(f.results[0]).shape));
  std::vector<std::vector<Buffer>> args(n), vargs(n);
  std::vector<Buffer> cts(n);
  for (int p = 0; p < n; ++p) {
    args[p] = {random_buffer(DType::kFloat64, xdims, seed * 100 + p, -1, 1)};
    cts[p] = random_buffer(DType::kFloat64, zdims, seed * 100 + 50 + p, -1, 1);
    vargs[p] = {args[p][0], cts[p]};
  }
  auto out = spmd_reference_evaluate(*vjp, n, vargs);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int p = 0; p < n; ++p) {
    Buffer x = args[p][0];
    std::vector<double> fd(x.num_elements());
    for (int64_t k = 0; k < x.num_elements(); ++k) {
      const double x0 = x.data<double>()[k], eps = 1e-6 * std::max(1.0, std::abs(x0));
      auto at = [&](double v) {
        std::vector<std::vector<Buffer>> a = args;
        a[p][0] = x.copy();
        a[p][0].mutable_data<double>()[k] = v;
        return objective(f, n, a, cts);
      };
      fd[k] = (at(x0 + eps) - at(x0 - eps)) / (2 * eps);
    }
    EXPECT_TRUE(buffers_near((*out)[p][1], Buffer::from_vector<double>(fd, xdims), 1e-6, 1e-7))
        << "partition " << p << " of " << n;
  }

  // Forward mode: the JVP program on every partition against central differences of f with every
  // partition's input moved along its tangent, and against the VJP: sum_d <ct_d, (J t)_d> = sum_d <(J^T ct)_d, t_d>.
  auto jvp = ir::jvp_program(f, {0});
  ASSERT_TRUE(jvp.ok()) << jvp.status();
  ASSERT_TRUE(ir::verify(*jvp).ok()) << ir::verify(*jvp);
  std::vector<std::vector<Buffer>> jargs(n), plus(n), minus(n);
  std::vector<Buffer> tangents(n);
  const double h = 1e-6;
  for (int p = 0; p < n; ++p) {
    tangents[p] = random_buffer(DType::kFloat64, xdims, seed * 100 + 80 + p, -1, 1);
    jargs[p] = {args[p][0], tangents[p]};
    Buffer up = args[p][0].copy(), down = args[p][0].copy();
    for (int64_t k = 0; k < up.num_elements(); ++k) {
      up.mutable_data<double>()[k] += h * tangents[p].data<double>()[k];
      down.mutable_data<double>()[k] -= h * tangents[p].data<double>()[k];
    }
    plus[p] = {up};
    minus[p] = {down};
  }
  auto jout = spmd_reference_evaluate(*jvp, n, jargs);
  ASSERT_TRUE(jout.ok()) << jout.status();
  auto fp = spmd_reference_evaluate(f, n, plus);
  auto fm = spmd_reference_evaluate(f, n, minus);
  ASSERT_TRUE(fp.ok() && fm.ok());
  double lhs = 0, rhs = 0;
  for (int p = 0; p < n; ++p) {
    std::vector<double> up = (*fp)[p][0].to_doubles(), down = (*fm)[p][0].to_doubles(), fd(up.size());
    for (size_t k = 0; k < fd.size(); ++k) fd[k] = (up[k] - down[k]) / (2 * h);
    EXPECT_TRUE(buffers_near((*jout)[p][1], Buffer::from_vector<double>(fd, zdims), 1e-6, 1e-7))
        << "tangent on partition " << p << " of " << n;
    std::vector<double> jt = (*jout)[p][1].to_doubles(), c = cts[p].to_doubles();
    std::vector<double> g = (*out)[p][1].to_doubles(), t = tangents[p].to_doubles();
    for (size_t k = 0; k < jt.size(); ++k) lhs += c[k] * jt[k];
    for (size_t k = 0; k < g.size(); ++k) rhs += g[k] * t[k];
  }
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, std::fabs(lhs))) << "jvp and vjp disagree on " << n << " partitions";

  // vmap: the batched program on every partition, with the examples (args, tangents as a second example)
  // stacked, gives each example's results.
  auto batched = ir::vmap_program(f, {true}, DimExpr(2));
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_TRUE(ir::verify(*batched).ok()) << ir::verify(*batched);
  std::vector<std::vector<Buffer>> bargs(n), second(n);
  for (int p = 0; p < n; ++p) {
    std::vector<double> both = args[p][0].to_doubles(), t = tangents[p].to_doubles();
    both.insert(both.end(), t.begin(), t.end());
    V dims = xdims;
    dims.insert(dims.begin(), 2);
    bargs[p] = {Buffer::from_vector<double>(both, dims)};
    second[p] = {tangents[p]};
  }
  auto bout = spmd_reference_evaluate(*batched, n, bargs);
  auto first_out = spmd_reference_evaluate(f, n, args);
  auto second_out = spmd_reference_evaluate(f, n, second);
  ASSERT_TRUE(bout.ok() && first_out.ok() && second_out.ok()) << bout.status();
  for (int p = 0; p < n; ++p) {
    std::vector<double> got = (*bout)[p][0].to_doubles(), want = (*first_out)[p][0].to_doubles();
    std::vector<double> want2 = (*second_out)[p][0].to_doubles();
    want.insert(want.end(), want2.begin(), want2.end());
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-14) << "vmap, partition " << p << ", element " << k;
  }
}

class SpmdVjp : public ::testing::TestWithParam<int> {};

TEST_P(SpmdVjp, AllReduce) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    SCOPED_TRACE(reduce_op_name(op));
    check_spmd_vjp(around(OpKind::kAllReduce, {2, 3}, ir::all_reduce_attrs(op, iota(n), n)), n, 1 + int(op));
  }
  if (n % 2 == 0) {  // two groups, members interleaved
    V groups;
    for (int p = 0; p < n; p += 2) groups.push_back(p);
    for (int p = 1; p < n; p += 2) groups.push_back(p);
    check_spmd_vjp(around(OpKind::kAllReduce, {3}, ir::all_reduce_attrs(ReduceOp::kSum, groups, n / 2)), n, 7);
    check_spmd_vjp(around(OpKind::kAllReduce, {3}, ir::all_reduce_attrs(ReduceOp::kProd, groups, n / 2)), n, 8);
  }
}

TEST_P(SpmdVjp, AllGatherAndReduceScatter) {
  const int n = GetParam();
  V rev = iota(n);
  std::reverse(rev.begin(), rev.end());
  check_spmd_vjp(around(OpKind::kAllGather, {2, 3}, ir::all_gather_attrs(1, rev, n)), n, 11);
  check_spmd_vjp(around(OpKind::kAllGather, {2, 3}, ir::all_gather_attrs(0, iota(n), n)), n, 12);
  check_spmd_vjp(around(OpKind::kReduceScatter, {2, 2 * n}, ir::reduce_scatter_attrs(1, ReduceOp::kSum, rev, n)), n, 13);
  check_spmd_vjp(around(OpKind::kReduceScatter, {n, 2}, ir::reduce_scatter_attrs(0, ReduceOp::kMax, iota(n), n)), n, 14);
  check_spmd_vjp(around(OpKind::kReduceScatter, {n, 2}, ir::reduce_scatter_attrs(0, ReduceOp::kMin, iota(n), n)), n, 15);
  check_spmd_vjp(around(OpKind::kReduceScatter, {2, 2 * n}, ir::reduce_scatter_attrs(1, ReduceOp::kProd, rev, n)), n, 16);
}

TEST_P(SpmdVjp, AllToAll) {
  const int n = GetParam();
  check_spmd_vjp(around(OpKind::kAllToAll, {2 * n, 3}, ir::all_to_all_attrs(0, 1, iota(n), n)), n, 21);
  check_spmd_vjp(around(OpKind::kAllToAll, {2, n, 2}, ir::all_to_all_attrs(1, 2, iota(n), n)), n, 22);
  check_spmd_vjp(around(OpKind::kAllToAll, {3, 2 * n}, ir::all_to_all_attrs(1, 1, iota(n), n)), n, 23);
}

TEST_P(SpmdVjp, CollectivePermuteAndShardingConstraint) {
  const int n = GetParam();
  V ring;
  for (int p = 0; p < n; ++p) ring.insert(ring.end(), {p, (p + 1) % n});
  check_spmd_vjp(around(OpKind::kCollectivePermute, {2, 2}, ir::collective_permute_attrs(ring)), n, 31);
  V partial;  // partition 0 sends to the last; nobody else sends (most receive zeros)
  partial = {0, n - 1};
  check_spmd_vjp(around(OpKind::kCollectivePermute, {3}, ir::collective_permute_attrs(partial)), n, 32);
  check_spmd_vjp(around(OpKind::kShardingConstraint, {2, 2}, Attrs{{"sharding", V{-1, 1, 0}}, {"mesh_shape", V{2}}}),
                 n, 33);
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, SpmdVjp, ::testing::Values(1, 2, 3, 4, 8));

TEST(SpmdVjpRules, ProdGradientIsExactWithZerosAndAxisIndexIsNotDifferentiated) {
  // y = prod over 3 members of x = (0, 2, 3); each member's cotangent is 1. dF/dx_m = 3 * (product of
  // the others): 18, 0, 0 -- no division by the zero.
  ir::ProgramBuilder pb("prod");
  ValueId px = pb.add_parameter(AbstractValue{DType::kFloat64, concrete_shape({})});
  Program prod = std::move(pb).build(
      {pb.emit_or_throw(OpKind::kAllReduce, {px}, ir::all_reduce_attrs(ReduceOp::kProd, {0, 1, 2}, 3))});
  Program gp = value_or_throw(ir::vjp_program(prod, {0}));
  std::vector<std::vector<Buffer>> pargs;
  for (double xv : {0.0, 2.0, 3.0}) pargs.push_back({Buffer::scalar<double>(xv), Buffer::scalar<double>(1.0)});
  auto grads = value_or_throw(spmd_reference_evaluate(gp, 3, pargs));
  const double want[] = {18.0, 0.0, 0.0};
  for (int p = 0; p < 3; ++p) EXPECT_EQ(grads[p].back().data<double>()[0], want[p]) << "partition " << p;
  // x * convert(axis_index): the gradient is convert(axis_index) per partition, no cotangent for the index.
  ir::ProgramBuilder b("f");
  ValueId x = b.add_parameter(AbstractValue{DType::kFloat64, concrete_shape({})});
  ValueId ai = b.convert(b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({4}, 0)), DType::kFloat64);
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, ai)});
  Program g = value_or_throw(ir::vjp_program(f, {0}));
  std::vector<std::vector<Buffer>> args;
  for (int p = 0; p < 4; ++p) args.push_back({Buffer::scalar<double>(1.5), Buffer::scalar<double>(2.0)});
  auto out = value_or_throw(spmd_reference_evaluate(g, 4, args));
  for (int p = 0; p < 4; ++p) EXPECT_EQ(out[p][1].data<double>()[0], 2.0 * p);
}

}  // namespace
}  // namespace mcx::test
