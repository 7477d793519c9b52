// The CPU backend's SPMD kernels: N threads, each running one partition of the same executable with a
// LocalGroup-backed communicator factory, against the lockstep SPMD reference (tests/support), on group
// sizes {1, 2, 3, 4, 8}; sub-groups of a 2x4 mesh; errors; VJP programs of collectives.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/core/error.h"
#include "mcx/collectives/local_communicator.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/spmd_rules.h"
#include "tests/support/reference_eval.h"
#include "tests/support/spmd_reference.h"
#include "tests/support/partition_groups.h"
#include "tests/support/test_util.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;
using ir::Program;
using ir::ValueId;
using testing::HasSubstr;
using V = std::vector<int64_t>;

using Groups = test::PartitionGroups;

struct SpmdRun {
  std::vector<absl::StatusOr<std::vector<Buffer>>> out;
};

// Runs partitions [0, n) (all of them unless `skip` names one that never starts) on one thread each.
SpmdRun run_partitions(const CpuExecutable& exe, int n, const std::vector<std::vector<Buffer>>& args,
                       absl::Duration timeout = absl::Seconds(20), int skip = -1) {
  Groups groups;
  SpmdRun run;
  run.out.resize(n, absl::UnknownError("not run"));
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    if (p == skip) continue;
    threads.emplace_back([&, p] {
      ExecutionContext ctx;
      ctx.partition_id = p;
      ctx.num_partitions = n;
      ctx.deadline = deadline;
      ctx.communicator = [&groups, p](std::span<const int64_t> g) { return groups.member(g, p); };
      run.out[p] = exe.execute(args[p], &ctx);
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

std::vector<std::vector<Buffer>> random_args(const Program& p, int n, uint64_t seed) {
  std::vector<std::vector<Buffer>> args(n);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < p.num_params(); ++i) {
      const AbstractValue& t = p.params[i];
      args[q].push_back(test::random_buffer(t.dtype, value_or_throw(to_concrete(t.shape)), seed * 1000 + q * 10 + i,
                                            -4, 4));
    }
  return args;
}

// Backend on n threads vs spmd_reference. Float sums may differ by the reference's single rounding.
void expect_matches_spmd_reference(const Program& p, int n, uint64_t seed = 1) {
  SCOPED_TRACE(testing::Message() << "program " << p.name << " on " << n << " partitions");
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto args = random_args(p, n, seed);
  auto ref = test::spmd_reference_evaluate(p, n, args);
  ASSERT_TRUE(ref.ok()) << ref.status();
  SpmdRun run = run_partitions(**exe, n, args);
  for (int q = 0; q < n; ++q) {
    ASSERT_TRUE(run.out[q].ok()) << "partition " << q << ": " << run.out[q].status();
    ASSERT_EQ(run.out[q]->size(), (*ref)[q].size());
    for (size_t r = 0; r < (*ref)[q].size(); ++r) {
      const Buffer& want = (*ref)[q][r];
      const double tol = want.dtype() == DType::kFloat32 ? 2e-6 : want.dtype() == DType::kFloat64 ? 1e-14 : 0;
      EXPECT_TRUE(test::buffers_near((*run.out[q])[r], want, tol, tol)) << "partition " << q << " result " << r;
    }
  }
}

AbstractValue type(DType t, V dims) { return AbstractValue{t, concrete_shape(dims)}; }
V iota(int n) {
  V v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}
V reversed(int n) {
  V v = iota(n);
  std::reverse(v.begin(), v.end());
  return v;
}

Program one_op(std::string name, OpKind k, AbstractValue t, ir::Attrs attrs) {
  ir::ProgramBuilder b(std::move(name));
  ValueId x = b.add_parameter(t);
  ValueId r = b.emit_or_throw(k, {x}, std::move(attrs));
  return std::move(b).build({r});
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceEveryOpAndDtype) {
  const int n = GetParam();
  expect_matches_spmd_reference(one_op("sum_f32", OpKind::kAllReduce, type(DType::kFloat32, {3, 5}),
                                       ir::all_reduce_attrs(ReduceOp::kSum, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("sum_f64", OpKind::kAllReduce, type(DType::kFloat64, {7}),
                                       ir::all_reduce_attrs(ReduceOp::kSum, reversed(n), n)), n);
  expect_matches_spmd_reference(one_op("max_i32", OpKind::kAllReduce, type(DType::kInt32, {4, 2}),
                                       ir::all_reduce_attrs(ReduceOp::kMax, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("min_f32", OpKind::kAllReduce, type(DType::kFloat32, {9}),
                                       ir::all_reduce_attrs(ReduceOp::kMin, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("prod_f64", OpKind::kAllReduce, type(DType::kFloat64, {5}),
                                       ir::all_reduce_attrs(ReduceOp::kProd, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("or_bool", OpKind::kAllReduce, type(DType::kBool, {6}),
                                       ir::all_reduce_attrs(ReduceOp::kMax, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("and_bool", OpKind::kAllReduce, type(DType::kBool, {6}),
                                       ir::all_reduce_attrs(ReduceOp::kMin, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("sum_i32", OpKind::kAllReduce, type(DType::kInt32, {}),
                                       ir::all_reduce_attrs(ReduceOp::kSum, iota(n), n)), n);
}

TEST_P(Collectives, AllGatherAlongEveryDim) {
  const int n = GetParam();
  for (int64_t d : {0, 1, 2})
    expect_matches_spmd_reference(one_op("all_gather_" + std::to_string(d), OpKind::kAllGather,
                                         type(DType::kFloat32, {2, 3, 2}), ir::all_gather_attrs(d, reversed(n), n)),
                                  n);
  expect_matches_spmd_reference(one_op("all_gather_i32", OpKind::kAllGather, type(DType::kInt32, {1}),
                                       ir::all_gather_attrs(0, iota(n), n)), n);
}

TEST_P(Collectives, ReduceScatterAlongEveryDim) {
  const int n = GetParam();
  expect_matches_spmd_reference(one_op("rs0", OpKind::kReduceScatter, type(DType::kFloat32, {2 * n, 3}),
                                       ir::reduce_scatter_attrs(0, ReduceOp::kSum, iota(n), n)), n);
  expect_matches_spmd_reference(one_op("rs1", OpKind::kReduceScatter, type(DType::kFloat64, {2, 3 * n, 2}),
                                       ir::reduce_scatter_attrs(1, ReduceOp::kSum, reversed(n), n)), n);
  expect_matches_spmd_reference(one_op("rs2_max", OpKind::kReduceScatter, type(DType::kInt32, {2, 3, n}),
                                       ir::reduce_scatter_attrs(2, ReduceOp::kMax, iota(n), n)), n);
}

TEST_P(Collectives, AllToAllEverySplitAndConcat) {
  const int n = GetParam();
  struct Case { V dims; int64_t split, concat; };
  for (const Case& c : {Case{{2 * n, 3}, 0, 1}, Case{{2, n, 3}, 1, 0}, Case{{2, 3, 2 * n}, 2, 2},
                        Case{{2, 2 * n, 3}, 1, 2}, Case{{n, 2}, 0, 0}, Case{{3, 2, n}, 2, 0}}) {
    expect_matches_spmd_reference(
        one_op("a2a_" + std::to_string(c.split) + std::to_string(c.concat), OpKind::kAllToAll,
               type(DType::kFloat32, c.dims), ir::all_to_all_attrs(c.split, c.concat, reversed(n), n)),
        n);
  }
}

TEST_P(Collectives, CollectivePermuteAndAxisIndex) {
  const int n = GetParam();
  V ring, partial{0, n - 1};
  for (int p = 0; p < n; ++p) ring.insert(ring.end(), {p, (p + 1) % n});
  expect_matches_spmd_reference(one_op("ring", OpKind::kCollectivePermute, type(DType::kFloat32, {2, 3}),
                                       ir::collective_permute_attrs(ring)), n);
  expect_matches_spmd_reference(one_op("partial", OpKind::kCollectivePermute, type(DType::kInt32, {4}),
                                       ir::collective_permute_attrs(partial)), n);
  expect_matches_spmd_reference(one_op("none", OpKind::kCollectivePermute, type(DType::kInt32, {4}),
                                       ir::collective_permute_attrs({})), n);
  ir::ProgramBuilder b("axis");
  ValueId x = b.add_parameter(type(DType::kFloat32, {3}));
  ValueId i = b.convert(b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({n}, 0)), DType::kFloat32);
  ValueId y = b.binary(OpKind::kMul, x, b.broadcast_in_dim(i, concrete_shape({3}), {}));
  ValueId s = b.emit_or_throw(OpKind::kShardingConstraint, {y}, {{"sharding", V{-1}}, {"mesh_shape", V{n}}});
  expect_matches_spmd_reference(std::move(b).build({s}), n);
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Collectives, ::testing::Values(1, 2, 3, 4, 8));

// A 2x4 mesh: rows {0,1,2,3}, {4,5,6,7} and columns {0,4}, {1,5}, ... as sub-groups, axis_index on both
// axes, a matmul in between (a model-parallel layer's shape).
TEST(CollectivesMesh, SubGroupsOfA2x4Mesh) {
  const V rows{0, 1, 2, 3, 4, 5, 6, 7}, cols{0, 4, 1, 5, 2, 6, 3, 7};
  ir::ProgramBuilder b("mesh");
  ValueId x = b.add_parameter(type(DType::kFloat32, {4, 6}));
  ValueId w = b.add_parameter(type(DType::kFloat32, {6, 8}));
  ValueId h = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                              {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
  ValueId row_sum = b.emit_or_throw(OpKind::kAllReduce, {h}, ir::all_reduce_attrs(ReduceOp::kSum, rows, 4));
  ValueId col_gather = b.emit_or_throw(OpKind::kAllGather, {row_sum}, ir::all_gather_attrs(1, cols, 2));
  ValueId scattered = b.emit_or_throw(OpKind::kReduceScatter, {col_gather},
                                      ir::reduce_scatter_attrs(0, ReduceOp::kMax, rows, 4));
  ValueId a2a = b.emit_or_throw(OpKind::kAllToAll, {h}, ir::all_to_all_attrs(1, 0, cols, 2));
  ValueId a0 = b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({2, 4}, 0));
  ValueId a1 = b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({2, 4}, 1));
  Program p = std::move(b).build({row_sum, col_gather, scattered, a2a, a0, a1});
  expect_matches_spmd_reference(p, 8, 3);
  // The results of one all_reduce are bitwise identical on the members of a row.
  auto exe = value_or_throw(CpuExecutable::compile(p));
  auto args = random_args(p, 8, 5);
  SpmdRun run = run_partitions(*exe, 8, args);
  for (int q = 0; q < 8; ++q) {
    ASSERT_TRUE(run.out[q].ok()) << run.out[q].status();
    EXPECT_TRUE((*run.out[q])[0].bitwise_equal((*run.out[q / 4 * 4])[0])) << "partition " << q;
    EXPECT_EQ((*run.out[q])[4].data<int32_t>()[0], q / 4);
    EXPECT_EQ((*run.out[q])[5].data<int32_t>()[0], q % 4);
  }
}

TEST(CollectivesMesh, ManyExecutionsReuseTheGroups) {
  Program p = one_op("sum", OpKind::kAllReduce, type(DType::kInt32, {2}), ir::all_reduce_attrs(ReduceOp::kSum, iota(4), 4));
  auto exe = value_or_throw(CpuExecutable::compile(p));
  Groups groups;
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int q = 0; q < 4; ++q) {
    threads.emplace_back([&, q] {
      ExecutionContext ctx{q, 4, [&groups, q](std::span<const int64_t> g) { return groups.member(g, q); },
                           absl::Now() + absl::Seconds(20)};
      for (int it = 0; it < 100; ++it) {
        Buffer x = Buffer::from_vector<int32_t>({q + it, 1}, {2});
        auto r = exe->execute({&x, 1}, &ctx);
        if (!r.ok() || (*r)[0].data<int32_t>()[0] != 6 + 4 * it || (*r)[0].data<int32_t>()[1] != 4) ++bad[q];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
  EXPECT_EQ(groups.count(), 1u);
}

TEST(CollectivesErrors, WithoutContextGroupsMustHaveSizeOne) {
  Program p = one_op("sum", OpKind::kAllReduce, type(DType::kFloat32, {2}), ir::all_reduce_attrs(ReduceOp::kSum, {0, 1}, 2));
  auto exe = value_or_throw(CpuExecutable::compile(p));
  EXPECT_TRUE(exe->has_collectives());
  Buffer x = Buffer::from_vector<float>({1, 2}, {2});
  auto r = exe->execute({&x, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("[all_reduce] partition 0 of 1: replica_groups cover 2"));
  // A size-1 group without context is the identity and matches reference_evaluate.
  Program one = one_op("one", OpKind::kAllGather, type(DType::kFloat32, {2}), ir::all_gather_attrs(0, {0}, 1));
  auto exe1 = value_or_throw(CpuExecutable::compile(one));
  auto got = value_or_throw(exe1->execute({&x, 1}));
  EXPECT_TRUE(got[0].bitwise_equal(value_or_throw(test::reference_evaluate(one, {&x, 1}))[0]));
  // A context without a communicator factory.
  ExecutionContext ctx{1, 2, nullptr, absl::Now() + absl::Seconds(5)};
  auto r2 = exe->execute({&x, 1}, &ctx);
  EXPECT_EQ(r2.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r2.status().message()), HasSubstr("[all_reduce] partition 1 of 2: group {0,1} has 2 members"));
  Program ai = one_op("no_coll", OpKind::kShardingConstraint, type(DType::kFloat32, {2}),
                      {{"sharding", V{-1}}, {"mesh_shape", V{1}}});
  EXPECT_FALSE(value_or_throw(CpuExecutable::compile(ai))->has_collectives());
}

TEST(CollectivesErrors, AMissingPartitionIsDeadlineExceededNamingIt) {
  Program p = one_op("sum", OpKind::kAllReduce, type(DType::kFloat32, {2}), ir::all_reduce_attrs(ReduceOp::kSum, iota(3), 3));
  auto exe = value_or_throw(CpuExecutable::compile(p));
  auto args = random_args(p, 3, 1);
  SpmdRun run = run_partitions(*exe, 3, args, absl::Milliseconds(100), /*skip=*/2);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(run.out[q].status().code(), absl::StatusCode::kDeadlineExceeded) << run.out[q].status();
    EXPECT_THAT(std::string(run.out[q].status().message()), HasSubstr("[all_reduce] partition "));
    EXPECT_THAT(std::string(run.out[q].status().message()), HasSubstr("waiting for p2"));
  }
}

// VJP programs of collectives run on the backend like the reference runs them (the reference's VJP
// values are checked against finite differences in tests/ir/spmd_vjp_test.cc).
TEST(CollectivesVjp, BackendRunsVjpProgramsLikeTheReference) {
  for (int n : {2, 3, 4}) {
    for (OpKind k : {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllToAll,
                     OpKind::kCollectivePermute}) {
      ir::Attrs a;
      V dims{2, 2 * n};
      switch (k) {
        case OpKind::kAllReduce: a = ir::all_reduce_attrs(ReduceOp::kMax, iota(n), n); break;
        case OpKind::kAllGather: a = ir::all_gather_attrs(1, reversed(n), n); break;
        case OpKind::kReduceScatter: a = ir::reduce_scatter_attrs(1, ReduceOp::kSum, iota(n), n); break;
        case OpKind::kAllToAll: a = ir::all_to_all_attrs(1, 0, iota(n), n); break;
        default: a = ir::collective_permute_attrs({0, 1, 1, 0}); break;
      }
      ir::ProgramBuilder b("f");
      ValueId x = b.add_parameter(type(DType::kFloat64, dims));
      ValueId z = b.emit_or_throw(k, {b.unary(OpKind::kSin, x)}, a);
      Program f = std::move(b).build({b.unary(OpKind::kTanh, z)});
      Program g = value_or_throw(ir::vjp_program(f, {0}));
      expect_matches_spmd_reference(g, n, 9);
    }
  }
}

}  // namespace
}  // namespace mcx::cpu
