// Collectives of GPU programs, both ways they run (backend/cuda/nccl_spmd.h): device to device over NCCL
// (MCX_GPU_COLLECTIVES=nccl: as many partitions as GPUs, else skipped) and through host memory
// (MCX_GPU_COLLECTIVES=staging: backend/cuda/staged_spmd.h). N partitions of one CUDA executable, each on its own
// thread and on local device p % (the GPUs this process has), meeting in LocalGroups as the runtime's do, against
// the same program's partitions on the CPU platform (within float32 rounding: NCCL reduces in its own order).
// Several partitions on one GPU is what processes sharing the lent GPU do. Under "nccl" the ops whose blocks
// are not contiguous (a gather along an inner dimension) still take staging, in the same program.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/collectives/local_communicator.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/platform/execution_context.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/partition_groups.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::OpKind;
using ir::ValueId;
using V = std::vector<int64_t>;

using Groups = PartitionGroups;

// Partition p of `program` on `platform`'s local device p % device_count, all at once; per partition its results
// on the host, or its error. Partitions in `absent` never start (their peers must time out).
std::vector<absl::StatusOr<std::vector<Buffer>>> run_partitions(Platform& platform, const ir::Program& program, int n,
                                                                const std::vector<std::vector<Buffer>>& args,
                                                                absl::Duration timeout = absl::Seconds(60),
                                                                int absent = -1) {
  std::vector<absl::StatusOr<std::vector<Buffer>>> out(n, absl::UnknownError("not run"));
  absl::StatusOr<std::shared_ptr<const Executable>> exe = platform.compile(program);
  if (!exe.ok()) {
    for (auto& o : out) o = exe.status();
    return out;
  }
  const int devices = std::max(1, platform.device_count().value_or(1));
  Groups groups;
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    if (p == absent) continue;
    threads.emplace_back([&, p]() {
      out[p] = [&]() -> absl::StatusOr<std::vector<Buffer>> {
        ExecutionContext ctx;
        ctx.partition_id = p;
        ctx.num_partitions = n;
        ctx.local_device = p % devices;
        ctx.deadline = deadline;
        ctx.communicator = [&groups, p](std::span<const int64_t> g) { return groups.member(g, p); };
        std::vector<std::shared_ptr<const DeviceBuffer>> held;
        std::vector<const DeviceBuffer*> raw;
        for (const Buffer& a : args[p]) {
          MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> b, platform.from_host(a, ctx.local_device));
          raw.push_back(b.get());
          held.push_back(std::move(b));
        }
        MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceBuffer>> results,
                             (*exe)->execute(std::span<const DeviceBuffer* const>(raw.data(), raw.size()), &ctx));
        std::vector<Buffer> host;
        for (const auto& r : results) {
          MCX_ASSIGN_OR_RETURN(Buffer h, platform.to_host(*r));
          host.push_back(std::move(h));
        }
        return host;
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::vector<std::vector<Buffer>> random_args(const ir::Program& p, int n, uint64_t seed) {
  std::vector<std::vector<Buffer>> args(n);
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < p.num_params(); ++i) {
      const AbstractValue& t = p.params[i];
      args[q].push_back(random_buffer(t.dtype, value_or_throw(to_concrete(t.shape)), seed * 1000 + q * 10 + i, -4, 4));
    }
  }
  return args;
}

// The GPU's partitions against the CPU's on the same arguments.
void expect_gpu_matches_cpu(const ir::Program& program, int n) {
  SCOPED_TRACE(::testing::Message() << "@" << program.name << " on " << n << " partitions");
  const std::vector<std::vector<Buffer>> args = random_args(program, n, 7);
  const auto cpu = run_partitions(platform("cpu"), program, n, args);
  const auto gpu = run_partitions(platform("cuda"), program, n, args);
  for (int q = 0; q < n; ++q) {
    ASSERT_TRUE(cpu[q].ok()) << "cpu partition " << q << ": " << cpu[q].status();
    ASSERT_TRUE(gpu[q].ok()) << "gpu partition " << q << ": " << gpu[q].status();
    ASSERT_EQ(gpu[q]->size(), cpu[q]->size());
    for (size_t r = 0; r < cpu[q]->size(); ++r) {
      EXPECT_TRUE(buffers_near((*gpu[q])[r], (*cpu[q])[r], 1e-6, 1e-6)) << "partition " << q << " result " << r;
    }
  }
}

AbstractValue type(DType t, V dims) { return AbstractValue{t, concrete_shape(std::move(dims))}; }
V iota(int n) {
  V v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}
V reversed(int n) {
  const V forward = iota(n);
  return V(forward.rbegin(), forward.rend());
}

// exp(x) through the collective, then a kernel on its result: device kernels on both sides of the staging.
ir::Program around(std::string name, OpKind k, AbstractValue t, ir::Attrs attrs) {
  ir::ProgramBuilder b(std::move(name));
  const ValueId x = b.add_parameter(t);
  const ValueId in = is_floating(t.dtype) ? b.unary(OpKind::kTanh, x) : x;
  const ValueId c = b.emit_or_throw(k, {in}, std::move(attrs));
  const ValueId r = b.binary(OpKind::kAdd, c, c);
  return std::move(b).build({r, c});
}

// (partitions, MCX_GPU_COLLECTIVES)
class GpuCollectives : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    const auto& [n, mode] = GetParam();
    const int gpus = platform("cuda").device_count().value_or(0);
    if (mode == "nccl" && n > gpus) GTEST_SKIP() << "NCCL runs one partition per GPU: " << n << " > " << gpus << " GPUs";
    setenv("MCX_GPU_COLLECTIVES", mode.c_str(), 1);
  }
  void TearDown() override { unsetenv("MCX_GPU_COLLECTIVES"); }
  int partitions() const { return std::get<0>(GetParam()); }
};

TEST_P(GpuCollectives, AllReduceOfEveryOpAndDtype) {
  const int n = partitions();
  expect_gpu_matches_cpu(around("sum_f32", OpKind::kAllReduce, type(DType::kFloat32, {3, 5}),
                                ir::all_reduce_attrs(ReduceOp::kSum, iota(n), n)), n);
  expect_gpu_matches_cpu(around("max_i32", OpKind::kAllReduce, type(DType::kInt32, {4, 2}),
                                ir::all_reduce_attrs(ReduceOp::kMax, reversed(n), n)), n);
  expect_gpu_matches_cpu(around("prod_f64", OpKind::kAllReduce, type(DType::kFloat64, {5}),
                                ir::all_reduce_attrs(ReduceOp::kProd, iota(n), n)), n);
  expect_gpu_matches_cpu(around("min_bf16", OpKind::kAllReduce, type(DType::kBFloat16, {9}),
                                ir::all_reduce_attrs(ReduceOp::kMin, iota(n), n)), n);
}

TEST_P(GpuCollectives, GatherScatterAllToAllAlongEveryDim) {
  const int n = partitions();
  for (int64_t d : {0, 1, 2}) {
    expect_gpu_matches_cpu(around("all_gather", OpKind::kAllGather, type(DType::kFloat32, {2, 3, 2}),
                                  ir::all_gather_attrs(d, reversed(n), n)), n);
  }
  expect_gpu_matches_cpu(around("reduce_scatter", OpKind::kReduceScatter, type(DType::kFloat32, {2, 3 * n, 2}),
                                ir::reduce_scatter_attrs(1, ReduceOp::kSum, iota(n), n)), n);
  expect_gpu_matches_cpu(around("reduce_scatter_0", OpKind::kReduceScatter, type(DType::kFloat32, {2 * n, 3}),
                                ir::reduce_scatter_attrs(0, ReduceOp::kMax, iota(n), n)), n);
  expect_gpu_matches_cpu(around("all_to_all", OpKind::kAllToAll, type(DType::kFloat16, {2, 2 * n, 3}),
                                ir::all_to_all_attrs(1, 2, reversed(n), n)), n);
  expect_gpu_matches_cpu(around("all_to_all_0", OpKind::kAllToAll, type(DType::kFloat32, {2 * n, 3}),
                                ir::all_to_all_attrs(0, 0, iota(n), n)), n);
}

TEST_P(GpuCollectives, PermuteAndAxisIndex) {
  const int n = partitions();
  V ring;
  for (int p = 0; p < n; ++p) ring.insert(ring.end(), {p, (p + 1) % n});
  expect_gpu_matches_cpu(around("ring", OpKind::kCollectivePermute, type(DType::kFloat32, {2, 3}),
                                ir::collective_permute_attrs(ring)), n);
  ir::ProgramBuilder b("axis");
  const ValueId x = b.add_parameter(type(DType::kFloat32, {3}));
  const ValueId i = b.convert(b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({n}, 0)), DType::kFloat32);
  const ValueId y = b.binary(OpKind::kMul, x, b.broadcast_in_dim(i, concrete_shape({3}), {}));
  expect_gpu_matches_cpu(std::move(b).build({y}), n);
  // A partial permutation: partition 0 sends to 1 only; the others receive zeros.
  if (n > 1) {
    expect_gpu_matches_cpu(around("partial", OpKind::kCollectivePermute, type(DType::kInt32, {4}),
                                  ir::collective_permute_attrs({0, 1})), n);
  }
}

INSTANTIATE_TEST_SUITE_P(Partitions, GpuCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values("nccl", "staging")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });

// A partition that never arrives: the others fail at their deadline naming the collective, instead of waiting.
TEST(GpuCollectiveErrors, AMissingPartitionIsDeadlineExceededNamingTheOp) {
  SKIP_WITHOUT_GPU();
  const ir::Program program = around("late", OpKind::kAllReduce, type(DType::kFloat32, {4}),
                                     ir::all_reduce_attrs(ReduceOp::kSum, iota(3), 3));
  const auto out = run_partitions(platform("cuda"), program, 3, random_args(program, 3, 1), absl::Milliseconds(300),
                                  /*absent=*/2);
  for (int q = 0; q < 2; ++q) {
    ASSERT_FALSE(out[q].ok());
    EXPECT_EQ(out[q].status().code(), absl::StatusCode::kDeadlineExceeded) << out[q].status();
    EXPECT_THAT(std::string(out[q].status().message()), ::testing::HasSubstr("[all_reduce]"));
  }
}

}  // namespace
}  // namespace mcx::test
