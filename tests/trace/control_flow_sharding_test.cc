// Control flow on a mesh: loops whose bodies partition run partitioned (the per-device body works on local
// shards; collectives it needs run inside it, every iteration), checked against the single-device result;
// the partitioned program's structure (no gathered carries, local body shapes) through spmd::partition;
// gradients through a partitioned scan; collectives inside loop bodies of shard_map. The test executable
// runs with MCX_CPU_DEVICE_COUNT=8.
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/text.h"
#include "mcx/spmd/partitioner.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using testing_util::expect_same_values;
using testing_util::random_array;

const ir::Instr* first_of(const ir::Program& p, ir::OpKind kind) {
  for (const ir::Instr& in : p.instrs)
    if (in.kind == kind) return &in;
  return nullptr;
}

// The per-device program of f for the given specs on a 1-d mesh of `n` devices named "data".
template <typename F, typename... Args>
spmd::PartitionedProgram partitioned(int64_t n, std::vector<PartitionSpec> specs, const F& f, const Args&... args) {
  ir::Program global = trace(f, args...);
  return value_or_throw(spmd::partition(global, MeshAxes{{"data"}, {n}}, specs, {}));
}

// An RNN over a batch: h <- tanh(h @ w + x_t), the per-step states stacked.
auto rnn = [](const Array& h0, const Array& xs, const Array& w) {
  return scan([&](const Array& h, const Array& x) {
    Array next = tanh(matmul(h, w) + x);
    return std::pair{next, next};
  }, h0, xs);
};

TEST(PartitionedControlFlow, ABatchShardedScanRunsOnLocalShardsWithoutGathering) {
  Mesh mesh = make_mesh({4}, {"data"});
  Array h0 = random_array({8, 4}, 1), xs = random_array({5, 8, 4}, 2), w = random_array({4, 4}, 3);
  auto [want_h, want_ys] = rnn(h0, xs, w);
  auto step = jit(rnn, {.name = "rnn",
                        .in_shardings = {NamedSharding(mesh, P("data")), NamedSharding(mesh, P(None, "data")),
                                         NamedSharding(mesh, P())}});
  auto [h, ys] = step(h0, xs, w);
  expect_same_values(h, want_h, 1e-5, 1e-6, "final state");
  expect_same_values(ys, want_ys, 1e-5, 1e-6, "stacked states");
  EXPECT_EQ(h.sharding(), NamedSharding(mesh, P("data")));
  EXPECT_EQ(ys.sharding(), NamedSharding(mesh, P(None, "data")));
  // The body runs on [2, 4] shards; nothing is gathered.
  spmd::PartitionedProgram p = partitioned(4, {P("data"), P(None, "data"), P()}, rnn, h0, xs, w);
  EXPECT_EQ(p.stats.all_gathers, 0) << ir::print_program(p.per_device);
  EXPECT_EQ(p.stats.fallback_gathers, 0);
  const ir::Instr* scan_op = first_of(p.per_device, ir::OpKind::kScan);
  ASSERT_NE(scan_op, nullptr);
  const ir::ScanConfig c = value_or_throw(ir::get_scan_config(scan_op->attrs, scan_op->operands.size()));
  EXPECT_EQ(c.body->params[0].to_string(), "f32[2,4]");
  EXPECT_EQ(c.body->params[1].to_string(), "f32[2,4]");
}

TEST(PartitionedControlFlow, CollectivesRunInsideTheLoopBodyEveryIteration) {
  // w split along the contraction: every step's matmul is a partial sum, all-reduced inside the body.
  Mesh mesh = make_mesh({4}, {"data"});
  Array h0 = random_array({3, 8}, 4), xs = random_array({6, 3, 8}, 5), w = random_array({8, 8}, 6);
  auto [want_h, want_ys] = rnn(h0, xs, w);
  auto step = jit(rnn, {.name = "rnn_model_parallel",
                        .in_shardings = {NamedSharding(mesh, P(None, "data")),
                                         NamedSharding(mesh, P(None, None, "data")),
                                         NamedSharding(mesh, P("data"))}});
  auto [h, ys] = step(h0, xs, w);
  expect_same_values(h, want_h, 1e-5, 1e-6, "final state");
  expect_same_values(ys, want_ys, 1e-5, 1e-6, "stacked states");
  spmd::PartitionedProgram p =
      partitioned(4, {P(None, "data"), P(None, None, "data"), P("data")}, rnn, h0, xs, w);
  const ir::Instr* scan_op = first_of(p.per_device, ir::OpKind::kScan);
  ASSERT_NE(scan_op, nullptr);
  const ir::ScanConfig c = value_or_throw(ir::get_scan_config(scan_op->attrs, scan_op->operands.size()));
  EXPECT_EQ(c.body->params[0].to_string(), "f32[3,2]");  // the carry stays split
  EXPECT_GE(p.stats.all_reduces + p.stats.all_gathers + p.stats.all_to_alls, 1);
  bool body_communicates = false;
  for (const ir::Instr& in : c.body->instrs) body_communicates = body_communicates || ir::is_collective(in.kind);
  EXPECT_TRUE(body_communicates) << ir::print_program(*c.body);
}

TEST(PartitionedControlFlow, GradientsThroughAPartitionedScanEqualOneDevice) {
  Mesh mesh = make_mesh({4}, {"data"});
  Array h0 = random_array({8, 4}, 7), xs = random_array({5, 8, 4}, 8), w = random_array({4, 4}, 9);
  auto loss = [](const Array& w, const Array& h0, const Array& xs) {
    auto [h, ys] = rnn(h0, xs, w);
    return mean(square(ys)) + mean(h);
  };
  Array want = jit(grad(loss))(w, h0, xs);
  auto step = jit(grad(loss), {.name = "rnn_grad",
                               .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data")),
                                                NamedSharding(mesh, P(None, "data"))},
                               .out_shardings = {NamedSharding(mesh, P())}});
  expect_same_values(step(w, h0, xs), want, 1e-5, 1e-6, "dL/dw on 4 devices");
}

TEST(PartitionedControlFlow, WhileAndCondWithShardedOperands) {
  // The condition reduces a sharded carry (an all-reduce inside cond); cond's branches see sharded operands.
  Mesh mesh = make_mesh({2, 2}, {"a", "b"});
  auto f = [](const Array& v, const Array& m) {
    Array grown = while_loop([](const Array& x) { return sum(x, {0, 1}) < 500.0f; },
                             [](const Array& x) { return x * 1.5f + 1.0f; }, v);
    return cond(sum(m, {0, 1}) > 0.0f, [](const std::pair<Array, Array>& o) { return o.first - o.second; },
                [](const std::pair<Array, Array>& o) { return o.first * o.second; }, std::pair{grown, m});
  };
  Array v = abs(random_array({4, 6}, 10)), m = random_array({4, 6}, 11);
  Array want = f(v, m);
  auto step = jit(f, {.name = "loops", .in_shardings = {NamedSharding(mesh, P("a", "b")), NamedSharding(mesh, P("a"))}});
  expect_same_values(step(v, m), want, 1e-5, 1e-6, "2x2 mesh");
  expect_same_values(step(v, -m), f(v, -m), 1e-5, 1e-6, "the other branch");
}

TEST(PartitionedControlFlow, PsumInsideAShardMapLoop) {
  // A manual (shard_map) body whose fori_loop all-reduces every iteration.
  Mesh mesh = make_mesh({4}, {"data"});
  auto body = [](const Array& x) {
    return fori_loop(0, 3, [](const Array&, const Array& acc) { return acc * 0.5f + psum(acc, "data"); }, x);
  };
  auto f = shard_map(body, mesh, {P("data")}, {P("data")});
  Array x = random_array({8, 2}, 12);
  // Reference by hand: per step, every shard becomes 0.5 * shard + (sum of the 4 shards).
  std::vector<Array> shards;
  for (int d = 0; d < 4; ++d) shards.push_back(slice(x, {2 * d, 0}, {2 * d + 2, 2}));
  for (int step = 0; step < 3; ++step) {
    Array total = shards[0] + shards[1] + shards[2] + shards[3];
    for (Array& s : shards) s = s * 0.5f + total;
  }
  expect_same_values(f(x), concatenate(shards, 0), 1e-5, 1e-6, "shard_map loop");
}

}  // namespace
}  // namespace mcx
