// shard_map inside jit, grad, jvp and vmap (a shard_map op staged into the enclosing program): values
// against the eager shard_map and closed forms, gradients against the same loss written without
// shard_map, over meshes of 1, 2, 3 and 4 devices and a 2x2 mesh; the errors a user meets.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;
using testing_util::expect_same_values;
using testing_util::random_array;

int count_ops(const ir::Program& p, ir::OpKind kind) {
  int n = 0;
  for (const ir::Instr& in : p.instrs) n += in.kind == kind ? 1 : 0;
  return n;
}

class ShardMapInTrace : public ::testing::TestWithParam<int> {};

// The per-device loss of a data-parallel step: the mean squared error of this device's rows, averaged
// over the devices (so the global value is the full-batch mean).
Array local_loss(const Array& w, const Array& x, const Array& y) {
  return pmean(mean(square(matmul(x, w) - y)), "data");
}
Array full_loss(const Array& w, const Array& x, const Array& y) { return mean(square(matmul(x, w) - y)); }

TEST_P(ShardMapInTrace, JitOfShardMapEqualsEagerAndTheClosedForm) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  auto f = shard_map([](const Array& x) { return psum(sum(x * 2.0f), "data"); }, mesh, {P("data")}, {P()});
  Array x = random_array({4 * n, 3}, 1);
  auto jitted = jit([&](const Array& a) { return f(a * 3.0f) + 1.0f; }, {.name = "outer"});
  Array got = jitted(x);
  Array eager = f(x * 3.0f) + 1.0f;
  expect_same_values(got, eager, 1e-5, 1e-5);
  double expected = 0;
  for (double v : x.to_host().to_doubles()) expected += 6.0 * v;
  expect_allclose(got, {expected + 1.0}, 1e-5, 1e-4);
  // Traced once; the program holds one shard_map op and runs on the mesh.
  Array again = jitted(x);
  EXPECT_EQ(jitted.cache_stats().misses, 1);
  const ir::Program program = trace([&](const Array& a) { return f(a); }, x);
  EXPECT_EQ(count_ops(program, ir::OpKind::kShardMap), 1);
  EXPECT_EQ(again.sharding().mesh(), mesh);
}

TEST_P(ShardMapInTrace, GradOfShardMapIsTheGradientOfTheGlobalLoss) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  auto loss = shard_map(local_loss, mesh, {P(), P("data"), P("data")}, {P()});
  Array w = random_array({3, 2}, 2), x = random_array({4 * n, 3}, 3), y = random_array({4 * n, 2}, 4);
  auto want = grad(full_loss, argnums<0, 1, 2>)(w, x, y);
  auto eager = grad(loss, argnums<0, 1, 2>)(w, x, y);
  auto jitted = jit(grad(loss, argnums<0, 1, 2>))(w, x, y);
  auto grad_of_jit = grad(jit(loss), argnums<0, 1, 2>)(w, x, y);
  for (const auto* got : {&eager, &jitted, &grad_of_jit}) {
    expect_same_values(std::get<0>(*got), std::get<0>(want), 1e-5, 1e-6);  // replicated w: summed over devices
    expect_same_values(std::get<1>(*got), std::get<1>(want), 1e-5, 1e-6);  // sharded x
    expect_same_values(std::get<2>(*got), std::get<2>(want), 1e-5, 1e-6);
  }
  expect_same_values(value_and_grad(loss)(w, x, y).first, full_loss(w, x, y), 1e-5, 1e-6);
}

// A result the body computes on every device without a collective (an out spec that does not name the
// axis) counts once, and a replicated argument's gradient sums the devices' shares: 2w, not 2nw or 2w/n.
TEST_P(ShardMapInTrace, ReplicatedResultsAndArgumentsCountOnce) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  auto sq = shard_map([](const Array& w) { return sum(w * w); }, mesh, {P()}, {P()});
  Array w = random_array({5}, 5);
  expect_same_values(grad(sq)(w), w * 2.0f, 1e-6, 1e-6);
  expect_same_values(jit(grad(sq))(w), w * 2.0f, 1e-6, 1e-6);
  // A sharded result summed outside the shard_map.
  auto cube = shard_map([](const Array& x) { return x * x * x; }, mesh, {P("data")}, {P("data")});
  Array x = random_array({2 * n}, 6);
  expect_same_values(grad([&](const Array& a) { return sum(cube(a)); })(x), x * x * 3.0f, 1e-5, 1e-6);
}

TEST_P(ShardMapInTrace, JvpAndVmapMatchThePlainFunction) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  auto loss = shard_map(local_loss, mesh, {P(), P("data"), P("data")}, {P()});
  Array w = random_array({3, 2}, 7), x = random_array({2 * n, 3}, 8), y = random_array({2 * n, 2}, 9), t = random_array({3, 2}, 10);
  auto f_loss = [&](const Array& v) { return loss(v, x, y); };
  auto f_full = [&](const Array& v) { return full_loss(v, x, y); };
  auto [value, tangent] = jvp(f_loss, std::make_tuple(w), std::make_tuple(t));
  auto [want_value, want_tangent] = jvp(f_full, std::make_tuple(w), std::make_tuple(t));
  expect_same_values(value, want_value, 1e-5, 1e-6);
  expect_same_values(tangent, want_tangent, 1e-5, 1e-6);
  // vmap over a batch of weight matrices equals the loop of single calls.
  Array ws = random_array({3, 3, 2}, 11);
  Array batched = vmap(f_loss)(ws);
  ASSERT_EQ(batched.dims(), (std::vector<int64_t>{3}));
  std::vector<double> want;
  for (int64_t b = 0; b < 3; ++b) want.push_back(f_full(reshape(slice(ws, {b, 0, 0}, {b + 1, 3, 2}), {3, 2})).to_host().to_doubles()[0]);
  expect_allclose(batched, want, 1e-5, 1e-6);
  expect_same_values(jit(vmap(f_loss))(ws), batched, 1e-6, 1e-6);
}

// The body closes over an array of the enclosing jit: it enters replicated, and its gradient is the
// sum of every device's share.
TEST_P(ShardMapInTrace, ClosedOverArraysEnterReplicated) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  Array x = random_array({2 * n, 3}, 12), w = random_array({3, 4}, 13);
  auto f = [&](const Array& xs, const Array& ws) {
    auto body = shard_map([&](const Array& local) { return matmul(local, ws); }, mesh, {P("data")}, {P("data")});
    return sum(tanh(body(xs)));
  };
  expect_same_values(jit(f)(x, w), sum(tanh(matmul(x, w))), 1e-5, 1e-5);
  auto [gx, gw] = jit(grad(f, argnums<0, 1>))(x, w);
  auto [want_x, want_w] = grad([](const Array& a, const Array& b) { return sum(tanh(matmul(a, b))); }, argnums<0, 1>)(x, w);
  expect_same_values(gx, want_x, 1e-5, 1e-6);
  expect_same_values(gw, want_w, 1e-5, 1e-6);
}

// A top-level (not jitted) loop whose body calls shard_map runs on the shard_map's mesh, as jit of it does.
TEST_P(ShardMapInTrace, EagerLoopsAroundAShardMapRunOnItsMesh) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"data"});
  auto smooth = shard_map([](const Array& x) { return x * 0.5f + pmean(x, "data") * 0.5f; }, mesh, {P("data")},
                          {P("data")});
  auto loop = [&](const Array& x) {
    return fori_loop(0, 3, [&](const Array&, const Array& c) { return smooth(c); }, x);
  };
  Array x = random_array({2 * n, 3}, 14);
  Array eager = loop(x);
  expect_same_values(eager, jit(loop)(x), 1e-6, 1e-6);
  Array want = x;
  for (int i = 0; i < 3; ++i) want = smooth(want);
  expect_same_values(eager, want, 1e-6, 1e-6);
  Array picked = cond(Array(true), [&](const Array& a) { return smooth(a); }, [](const Array& a) { return a; }, x);
  expect_same_values(picked, smooth(x), 1e-6, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Devices, ShardMapInTrace, ::testing::Values(1, 2, 3, 4));

// A 2x2 mesh: blocks split over both axes, a psum over one of them, the result split over the other.
TEST(ShardMapInTrace2D, PsumOverOneAxisOfTwo) {
  Mesh mesh = make_mesh({2, 2}, {"a", "b"});
  auto f = shard_map([](const Array& x) { return psum(x * x, "b"); }, mesh, {P("a", "b")}, {P("a")});
  Array x = random_array({4, 6}, 14);
  // Reference: rows split over a; each device's [2, 3] block squared, summed over the two column blocks.
  auto reference = [](const Array& a) {
    Array s = a * a;
    return slice(s, {0, 0}, {4, 3}) + slice(s, {0, 3}, {4, 6});
  };
  expect_same_values(jit(f)(x), reference(x), 1e-6, 1e-6);
  expect_same_values(f(x), reference(x), 1e-6, 1e-6);
  auto g = grad([&](const Array& a) { return sum(f(a) * f(a)); });
  auto want = grad([&](const Array& a) { return sum(reference(a) * reference(a)); });
  expect_same_values(jit(g)(x), want(x), 1e-5, 1e-5);
}

TEST(ShardMapInTraceErrors, NestingAndTwoMeshesAreRefused) {
  Mesh mesh = make_mesh({2}, {"data"});
  Mesh other = make_mesh({4}, {"data"});
  auto inner = shard_map([](const Array& x) { return x; }, mesh, {P()}, {P()});
  auto outer = shard_map([&](const Array& x) { return inner(x); }, mesh, {P("data")}, {P("data")});
  EXPECT_THAT(error_of([&] { outer(random_array({4}, 1)); }), HasSubstr("nested shard_maps are not supported"));
  EXPECT_THAT(error_of([&] { jit([&](const Array& x) { return outer(x); })(random_array({4}, 1)); }),
              HasSubstr("nested shard_maps are not supported"));
  auto on_other = shard_map([](const Array& x) { return x; }, other, {P("data")}, {P("data")});
  EXPECT_THAT(error_of([&] { jit([&](const Array& x) { return inner(x) + on_other(x); })(random_array({4}, 1)); }),
              HasSubstr("one traced computation uses two meshes"));
  auto uneven = shard_map([](const Array& x) { return x; }, mesh, {P("data")}, {P("data")});
  EXPECT_THAT(error_of([&] { jit([&](const Array& x) { return uneven(x); })(random_array({3}, 1)); }),
              HasSubstr("3"));
}

}  // namespace
}  // namespace mcx
