// Sharded arrays through the user API: device_put/device_get, jit on a mesh (partitioned programs against
// the one-device result), with_sharding_constraint, eager ops on sharded arrays, donation, asynchronous
// dispatch and its errors. The test executable runs with MCX_CPU_DEVICE_COUNT=8.
#include <future>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/runtime/stream.h"
#include "tests/support/test_util.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using ::testing::AllOf;
using ::testing::Not;
using testing_util::error_of;
using testing_util::expect_allclose;

Buffer random_buffer(std::vector<int64_t> dims, uint32_t seed) {
  return test::random_buffer(DType::kFloat32, std::move(dims), seed);
}

std::vector<double> doubles(const Buffer& b) { return b.to_doubles(); }

TEST(Devices, EightVirtualDevicesWithStreams) {
  ASSERT_EQ(device_count(), 8);
  ASSERT_EQ(local_device_count(), 8);
  EXPECT_EQ(process_index(), 0);
  EXPECT_EQ(process_count(), 1);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devices()[i].global_id, i);
    EXPECT_EQ(devices()[i].local_id, i);
    EXPECT_EQ(devices()[i].to_string(), "cpu:" + std::to_string(i));
  }
}

TEST(DevicePut, ShardsHoldTheirBoxes) {
  Mesh mesh = make_mesh({2, 2}, {"x", "y"});
  Buffer host = random_buffer({4, 6}, 1);
  Array a = device_put(host, NamedSharding(mesh, P("x", "y")));
  EXPECT_TRUE(a.committed());
  EXPECT_FALSE(a.is_fully_replicated());
  std::vector<ArrayShard> shards = a.addressable_shards();
  ASSERT_EQ(shards.size(), 4u);
  for (const ArrayShard& s : shards) {
    ASSERT_EQ(s.data.dims(), (std::vector<int64_t>{2, 3}));
    Buffer local = s.data.to_host();
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(local.data<float>()[r * 3 + c],
                  host.data<float>()[(s.index.start[0] + r) * 6 + s.index.start[1] + c]);
      }
    }
  }
  EXPECT_TRUE(device_get(a).bitwise_equal(host));
  // Resharding to another layout and back keeps every bit.
  Array b = device_put(a, NamedSharding(mesh, P(axes("y", "x"), None)));
  EXPECT_EQ(b.addressable_shards().front().data.dims(), (std::vector<int64_t>{1, 6}));
  EXPECT_TRUE(device_get(b).bitwise_equal(host));
  Array c = device_put(b, devices()[5]);
  EXPECT_EQ(c.sharding().device_set().front(), devices()[5]);
  EXPECT_TRUE(c.to_host().bitwise_equal(host));
}

TEST(DevicePut, UnevenDimensionIsAClearError) {
  Mesh mesh = make_mesh({4}, {"data"});
  std::string e = error_of([&] { device_put(random_buffer({6, 2}, 2), NamedSharding(mesh, P("data"))); });
  EXPECT_THAT(e, HasSubstr("[device_put]"));
  EXPECT_THAT(e, HasSubstr("6"));
  EXPECT_THAT(e, HasSubstr("data"));
}

// A small computation with every kind of partitioning rule: elementwise, broadcast, dot_general with a
// sharded batch (free) dimension, a reduction over the sharded dimension and a transpose.
Array mixed(const Array& x, const Array& w, const Array& b) {
  Array h = tanh(matmul(x, w) + b);
  Array s = sum(h * h, {0});
  return transpose(h, {1, 0}) * 0.5f + reshape(s, {4, 1});
}

class JitOnMesh : public ::testing::TestWithParam<int> {};

TEST_P(JitOnMesh, PartitionedResultMatchesOneDevice) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  Buffer xb = random_buffer({24, 8}, 3), wb = random_buffer({8, 4}, 4), bb = random_buffer({4}, 5);
  Array expected = jit(mixed)(Array(xb), Array(wb), Array(bb));

  auto f = jit(mixed, {.name = "mixed",
                       .in_shardings = {NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P()),
                                        NamedSharding(mesh, P())},
                       .out_shardings = {NamedSharding(mesh, P(None, "data"))}});
  Array got = f(Array(xb), Array(wb), Array(bb));
  EXPECT_EQ(got.sharding(), NamedSharding(mesh, P(None, "data")));
  EXPECT_EQ(got.addressable_shards().size(), static_cast<size_t>(n));
  expect_allclose(got, doubles(expected.to_host()), 1e-5, 1e-5);
}

TEST_P(JitOnMesh, FollowsCommittedArgumentsAndContractingShards) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"k"});
  Buffer xb = random_buffer({6, 24}, 6), wb = random_buffer({24, 5}, 7);
  Array x = device_put(xb, NamedSharding(mesh, P(None, "k")));
  Array w = device_put(wb, NamedSharding(mesh, P("k", None)));
  auto f = jit([](const Array& a, const Array& b) { return matmul(a, b); });
  Array got = f(x, w);  // contracting dimension sharded on both sides: partial sums + all_reduce
  Array expected = matmul(Array(xb), Array(wb));
  expect_allclose(got, doubles(expected.to_host()), 1e-5, 1e-5);
  EXPECT_TRUE(got.committed());
  EXPECT_EQ(got.sharding().mesh(), mesh);
}

INSTANTIATE_TEST_SUITE_P(Devices, JitOnMesh, ::testing::Values(1, 2, 3, 4, 8));

TEST(JitOnMesh, GradOfDataParallelLossMatchesOneDevice) {
  Mesh mesh = make_mesh({4}, {"data"});
  auto loss = [](const Array& w, const Array& x, const Array& y) {
    Array pred = matmul(x, w);
    return mean(square(pred - y));
  };
  Buffer wb = random_buffer({8, 3}, 8), xb = random_buffer({16, 8}, 9), yb = random_buffer({16, 3}, 10);
  Array g1 = jit(grad(loss))(Array(wb), Array(xb), Array(yb));
  auto step = jit(grad(loss), {.name = "grad_step",
                               .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data")),
                                                NamedSharding(mesh, P("data"))},
                               .out_shardings = {NamedSharding(mesh, P())}});
  Array g4 = step(Array(wb), Array(xb), Array(yb));
  EXPECT_TRUE(g4.is_fully_replicated());
  expect_allclose(g4, doubles(g1.to_host()), 1e-5, 1e-6);
}

TEST(JitOnMesh, ShardingConstraintPinsAnIntermediate) {
  Mesh mesh = make_mesh({2, 2}, {"a", "b"});
  Buffer xb = random_buffer({8, 8}, 11);
  auto f = jit([&](const Array& x) {
    Array y = with_sharding_constraint(exp(x), NamedSharding(mesh, P("a", "b")));
    return y * 2.0f;
  });
  Array got = f(Array(xb));
  EXPECT_EQ(got.sharding().mesh(), mesh);
  expect_allclose(got, doubles((exp(Array(xb)) * 2.0f).to_host()), 1e-6, 1e-6);
}

TEST(EagerOps, RunWhereTheirShardedOperandsLive) {
  Mesh mesh = make_mesh({4}, {"data"});
  Buffer xb = random_buffer({8, 3}, 12);
  Array x = device_put(xb, NamedSharding(mesh, P("data")));
  Array y = x * 3.0f + 1.0f;
  EXPECT_EQ(y.sharding(), x.sharding());
  expect_allclose(y, doubles((Array(xb) * 3.0f + 1.0f).to_host()), 1e-6, 1e-6);
  Array total = sum(x);
  expect_allclose(total, doubles(sum(Array(xb)).to_host()), 1e-5, 1e-5);
}

TEST(EagerOps, CommittedToDifferentDevicesIsAnError) {
  Array a = device_put(Array(random_buffer({3}, 13)), devices()[1]);
  Array b = device_put(Array(random_buffer({3}, 14)), devices()[2]);
  std::string e = error_of([&] { (a + b).block_until_ready(); });
  EXPECT_THAT(e, HasSubstr("committed to different devices"));
  EXPECT_THAT(e, HasSubstr("cpu:1"));
  EXPECT_THAT(e, HasSubstr("cpu:2"));
  // Uncommitted data follows the committed operand.
  Array c = a + Array(random_buffer({3}, 15));
  EXPECT_EQ(c.sharding().device_set().front(), devices()[1]);
}

TEST(Donation, DonatedArgumentReadsAsDeleted) {
  auto f = jit([](const Array& x, const Array& y) { return x + y; }, {.name = "upd", .donate_argnums = {0}});
  Array x = device_put(Array(random_buffer({4}, 16)), devices()[0]);
  Array y = device_put(Array(random_buffer({4}, 17)), devices()[0]);
  Array expected = x + y;
  expected.block_until_ready();
  Array z = f(x, y);
  expect_allclose(z, doubles(expected.to_host()));
  std::string e = error_of([&] { x.to_host(); });
  EXPECT_THAT(e, HasSubstr("deleted"));
  EXPECT_THAT(e, HasSubstr("donated to jit of 'upd' argument 0"));
  EXPECT_NO_THROW(y.to_host());
  // Donating a deleted array again is refused before anything runs.
  EXPECT_THAT(error_of([&] { f(x, y); }), HasSubstr("already donated"));
  // A sharded call donates every shard; the launch is checked as a whole first.
  Mesh mesh = make_mesh({4}, {"d"});
  auto g = jit([](const Array& a, const Array& b) { return a * b; },
               {.name = "upd4", .in_shardings = {NamedSharding(mesh, P("d")), NamedSharding(mesh, P("d"))},
                .donate_argnums = {0}});
  Array a = device_put(random_buffer({8}, 40), NamedSharding(mesh, P("d")));
  Array b = device_put(random_buffer({8}, 41), NamedSharding(mesh, P("d")));
  Array want = a * b;
  expect_allclose(g(a, b), doubles(want.to_host()));
  for (const ArrayShard& s : a.addressable_shards()) EXPECT_THAT(error_of([&] { s.data.to_host(); }), HasSubstr("deleted"));
  EXPECT_THAT(error_of([&] { g(a, b); }), HasSubstr("already donated"));
}

// One buffer both donated and read by the same call is refused at the call (it used to return normally and
// leave the result unreadable: "the array was deleted"); nothing is donated, so the argument stays usable.
TEST(Donation, TheSameBufferDonatedAndReadByOneCallIsRefused) {
  auto f = jit([](const Array& x, const Array& y) { return x + y; }, {.name = "upd", .donate_argnums = {0}});
  Array p = device_put(Array(random_buffer({4}, 18)), devices()[0]);
  const Buffer host = p.to_host();
  std::string e = error_of([&] { f(p, p).block_until_ready(); });
  EXPECT_THAT(e, AllOf(HasSubstr("[jit of 'upd']"), HasSubstr("argument 0 is donated but its buffer is also passed as argument 1"),
                       HasSubstr("cannot also be read")));
  expect_allclose(p, doubles(host));  // not deleted
  // Donating it twice has its own message (not "already deleted").
  auto g = jit([](const Array& x, const Array& y) { return x * y; }, {.name = "upd2", .donate_argnums = {0, 1}});
  e = error_of([&] { g(p, p).block_until_ready(); });
  EXPECT_THAT(e, AllOf(HasSubstr("arguments 0 and 1 donate the same buffer twice"), Not(HasSubstr("deleted"))));
  expect_allclose(p, doubles(host));
  // The same for a sharded call (every device's shard is the same buffer twice).
  Mesh mesh = make_mesh({4}, {"d"});
  Array a = device_put(random_buffer({8}, 42), NamedSharding(mesh, P("d")));
  auto h = jit([](const Array& x, const Array& y) { return x - y; }, {.name = "upd4", .donate_argnums = {1}});
  EXPECT_THAT(error_of([&] { h(a, a).block_until_ready(); }),
              HasSubstr("argument 1 is donated but its buffer is also passed as argument 0"));
  for (const ArrayShard& s : a.addressable_shards()) EXPECT_NO_THROW(s.data.to_host());
  // Distinct buffers with equal values are fine.
  Array q = device_put(Array(host), devices()[0]);
  expect_allclose(f(q, p), doubles((Array(host) + Array(host)).to_host()));
}

// A copy enqueued before a donation still reads the data: the donation orders after it. (Replicating an array
// shares its buffer on its own device and copies it to the others; donating the original while a copy waited
// on a busy stream failed that copy with "the array was deleted", and a step that used the replica then left
// its peers waiting in a collective until the deadline.)
TEST(Donation, ACopyEnqueuedBeforeTheDonationStillReadsTheData) {
  auto inc = jit([](const Array& x) { return x + 1.0f; }, {.name = "inc", .donate_argnums = {0}});
  Buffer host = random_buffer({6}, 21);
  Array x = device_put(Array(host), devices()[0]);
  x.block_until_ready();
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  stream_for(devices()[1]).enqueue([open] { open.wait(); });  // holds cpu:1's copy back
  Mesh mesh = make_mesh({2}, {"d"}, {devices()[0], devices()[1]});
  Array replica = device_put(x, NamedSharding(mesh, P()));  // cpu:0 shares x's buffer; cpu:1 copies it, later
  Array y = inc(x);  // donates x while the copy to cpu:1 is still queued
  gate.set_value();
  // (The replica's cpu:0 shard is x's own buffer, which the donation deleted with x.)
  const std::vector<ArrayShard> shards = replica.addressable_shards();
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[1].device, devices()[1]);
  expect_allclose(shards[1].data, doubles(host));
  y.block_until_ready();
  EXPECT_THAT(error_of([&] { x.to_host(); }), HasSubstr("deleted"));
}

TEST(AsyncDispatch, OpsReturnBeforeInputsAreReadyAndErrorsSurfaceAtTheWait) {
  ArrayValue pending = ArrayValue::single_pending(AbstractValue{DType::kFloat32, concrete_shape({3})},
                                                  devices()[3], /*committed=*/true);
  std::shared_ptr<AsyncBuffer> input = pending.shards.front().data;
  Array x(pending);
  Array y = exp(x) + 1.0f;  // enqueued on cpu:3 behind the pending input; returns at once
  Array z = y * 2.0f;
  EXPECT_FALSE(input->is_ready());
  input->set_error(absl::InternalError("[producer on cpu:3] simulated kernel failure"));
  std::string e = error_of([&] { z.block_until_ready(); });
  EXPECT_THAT(e, HasSubstr("simulated kernel failure"));

  ArrayValue ok = ArrayValue::single_pending(AbstractValue{DType::kFloat32, concrete_shape({2})}, devices()[3], true);
  Array w(ok);
  Array v = w + 1.0f;
  ok.shards.front().data->set(value_or_throw(to_device(Buffer::from_vector<float>({1.0f, 2.0f}, {2}), ok.shards.front().device)));
  expect_allclose(v, {2.0, 3.0});
}

TEST(ConcurrentJit, ManyThreadsShareShardedExecutables) {
  Mesh mesh = make_mesh({4}, {"data"});
  auto f = jit([](const Array& x) { return sum(x * x, {1}); },
               {.name = "rows", .in_shardings = {NamedSharding(mesh, P("data"))}});
  Buffer xb = random_buffer({8, 16}, 18);
  std::vector<double> expected = doubles(sum(Array(xb) * Array(xb), {1}).to_host());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        std::vector<double> got = f(Array(xb)).to_host().to_doubles();
        for (size_t k = 0; k < got.size(); ++k) {
          if (std::fabs(got[k] - expected[k]) > 1e-4) ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace mcx

namespace mcx {
namespace {

TEST(MakeArray, FromCallbackSingleDeviceArraysAndProcessLocalData) {
  Mesh mesh = make_mesh({2, 2}, {"x", "y"});
  Sharding sharding = NamedSharding(mesh, P("x"));
  Buffer host = random_buffer({4, 3}, 30);
  int calls = 0;
  Array a = make_array_from_callback({4, 3}, DType::kFloat32, sharding, [&](const IndexBox& box) {
    ++calls;
    std::vector<float> v;
    for (int64_t r = box.start[0]; r < box.limit[0]; ++r) {
      for (int64_t c = box.start[1]; c < box.limit[1]; ++c) v.push_back(host.data<float>()[r * 3 + c]);
    }
    return Buffer::from_vector<float>(v, box.shape());
  });
  EXPECT_EQ(calls, 4);  // once per addressable shard
  EXPECT_TRUE(device_get(a).bitwise_equal(host));

  std::vector<Array> pieces;
  for (const ArrayShard& s : a.addressable_shards()) pieces.push_back(device_put(s.data.to_host(), s.device));
  Array b = make_array_from_single_device_arrays({4, 3}, sharding, pieces);
  EXPECT_TRUE(device_get(b).bitwise_equal(host));
  std::vector<Array> wrong(pieces.begin(), pieces.end() - 1);
  EXPECT_THAT(error_of([&] { make_array_from_single_device_arrays({4, 3}, sharding, wrong); }),
              HasSubstr("make_array_from_single_device_arrays"));

  // One process holds the whole global array.
  Array c = make_array_from_process_local_data(sharding, host);
  EXPECT_EQ(c.dims(), (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(device_get(c).bitwise_equal(host));
}

// jax.debug.visualize_array_sharding: the array's own sharding drawn (one cell per shard), and a tracer refused.
TEST(VisualizeArraySharding, DrawsTheArraysShardsAndRefusesATracer) {
  const Mesh m = make_mesh({2, 2}, {"x", "y"});
  const Array x = device_put(Buffer::from_vector<float>(std::vector<float>(24, 1.0f), {4, 6}),
                             NamedSharding(m, P("x", "y")));
  const std::string grid = visualize_array_sharding(x);
  EXPECT_EQ(grid, visualize_sharding(x.dims(), x.sharding()));
  EXPECT_EQ(std::count(grid.begin(), grid.end(), '\n'), 5);  // two rows of cells between three rules
  EXPECT_THAT(grid, ::testing::HasSubstr(m.devices()[3].to_string()));
  auto f = jit([](const Array& a) {
    EXPECT_THROW((void)visualize_array_sharding(a), InvalidArgument);
    return a;
  });
  (void)f(x);
}

}  // namespace
}  // namespace mcx
