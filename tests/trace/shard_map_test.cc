// shard_map and the collectives of its body, checked against values computed directly from the global
// input, over meshes of 1, 2, 3, 4 and 8 devices; grad inside shard_map; the guards at the API level.
#include <numeric>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/runtime/spmd_executable.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_allclose;

// x[i, j] = 100 * i + j as f32, rows split over the devices of the "i" axis.
Buffer grid(int64_t rows, int64_t cols) {
  std::vector<float> v(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = static_cast<float>(100 * i + j);
  }
  return Buffer::from_vector<float>(v, {rows, cols});
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, PsumPmaxPminPmeanOverTheAxis) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"i"});
  Buffer x = grid(n, 3);  // one row per device
  auto f = shard_map(
      [](const Array& local) {
        return std::make_tuple(psum(local, "i"), pmax(local, "i"), pmin(local, "i"), pmean(local, "i"));
      },
      mesh, {P("i")}, {P()});
  auto [s, mx, mn, me] = f(Array(x));
  std::vector<double> sum(3, 0), hi(3, -1e30), lo(3, 1e30);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) {
      double v = 100.0 * i + j;
      sum[j] += v;
      hi[j] = std::max(hi[j], v);
      lo[j] = std::min(lo[j], v);
    }
  }
  std::vector<double> mean(3);
  for (int j = 0; j < 3; ++j) mean[j] = sum[j] / n;
  EXPECT_EQ(s.dims(), (std::vector<int64_t>{1, 3}));
  expect_allclose(s, sum);
  expect_allclose(mx, hi);
  expect_allclose(mn, lo);
  expect_allclose(me, mean);
}

TEST_P(Collectives, AllGatherTiledAndStacked) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"i"});
  Buffer x = grid(2 * n, 2);
  auto f = shard_map(
      [](const Array& local) {
        return std::make_tuple(all_gather(local, "i", 0, /*tiled=*/true), all_gather(local, "i", 0, false));
      },
      mesh, {P("i")}, {P()});
  auto [tiled, stacked] = f(Array(x));
  EXPECT_EQ(tiled.dims(), (std::vector<int64_t>{2 * n, 2}));
  EXPECT_EQ(stacked.dims(), (std::vector<int64_t>{n, 2, 2}));
  expect_allclose(tiled, x.to_doubles());
  expect_allclose(stacked, x.to_doubles());
}

TEST_P(Collectives, PsumScatterAllToAllPpermuteAxisIndex) {
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"i"});
  // Every device holds the same [n, 2] block offset by its index: psum_scatter gives device d row d of
  // the sum.
  auto scatter = shard_map(
      [n](const Array& local) {
        Array idx = astype(axis_index("i"), DType::kFloat32);
        Array block = reshape(local, {n, 2}) + idx;
        return psum_scatter(block, "i", 0, /*tiled=*/true);
      },
      mesh, {P()}, {P("i")});
  Buffer base = grid(n, 2);
  Array rs = scatter(Array(base.reshaped({n * 2})));
  std::vector<double> expected;
  const double idx_sum = n * (n - 1) / 2.0;
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < 2; ++c) expected.push_back(n * (100.0 * r + c) + idx_sum);
  }
  expect_allclose(rs, expected);

  // all_to_all: device d holds row block d of an [n*n, 1] array; after splitting its n rows and
  // exchanging, device d holds element d of every block: a transpose of the [n, n] grid.
  auto a2a = shard_map([](const Array& local) { return all_to_all(local, "i", 0, 0); }, mesh, {P("i")}, {P("i")});
  std::vector<float> v(n * n);
  std::iota(v.begin(), v.end(), 0.0f);
  Array t = a2a(Array(Buffer::from_vector<float>(v, {n * n, 1})));
  std::vector<double> transposed;
  for (int d = 0; d < n; ++d) {
    for (int s = 0; s < n; ++s) transposed.push_back(s * n + d);
  }
  expect_allclose(t, transposed);

  // ppermute around a ring: device d receives from d-1.
  std::vector<std::pair<int, int>> ring;
  for (int d = 0; d < n; ++d) ring.emplace_back(d, (d + 1) % n);
  auto shift = shard_map([&](const Array& local) { return ppermute(local, "i", ring); }, mesh, {P("i")}, {P("i")});
  std::vector<float> ids(n);
  std::iota(ids.begin(), ids.end(), 0.0f);
  Array shifted = shift(Array(Buffer::from_vector<float>(ids, {n})));
  std::vector<double> want(n);
  for (int d = 0; d < n; ++d) want[d] = (d + n - 1) % n;
  expect_allclose(shifted, want);
}

TEST_P(Collectives, SharedAllReduceResultIsNeverUpdatedInPlace) {
  // In one process the members of a psum share one result buffer; an elementwise consumer that could
  // reuse a dying input's storage must not write into it (every device would apply its update to the
  // same memory).
  const int n = GetParam();
  Mesh mesh = make_mesh({n}, {"i"});
  auto f = shard_map([](const Array& local) { return psum(local, "i") * 2.0f + 1.0f; }, mesh, {P("i")}, {P("i")});
  Buffer x = grid(n, 1024);
  for (int round = 0; round < 3; ++round) {
    Array out = f(Array(x));
    std::vector<double> expected;
    for (int d = 0; d < n; ++d) {
      for (int j = 0; j < 1024; ++j) {
        double s = 0;
        for (int i = 0; i < n; ++i) s += 100.0 * i + j;
        expected.push_back(2 * s + 1);
      }
    }
    expect_allclose(out, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Collectives, ::testing::Values(1, 2, 3, 4, 8));

TEST(Collectives, SubgroupsOfATwoByFourMesh) {
  Mesh mesh = make_mesh({2, 4}, {"x", "y"});
  auto f = shard_map(
      [](const Array& local) {
        Array xi = astype(axis_index("x"), DType::kFloat32);
        Array yi = astype(axis_index("y"), DType::kFloat32);
        Array both = astype(axis_index({"x", "y"}), DType::kFloat32);
        return std::make_tuple(psum(local * 0.0f + yi, "y"), psum(local * 0.0f + xi, "x"),
                               psum(local * 0.0f + both, {"x", "y"}));
      },
      mesh, {P("x", "y")}, {P("x", "y")});
  auto [sy, sx, sxy] = f(Array(grid(2, 4)));
  // Per device: sum over y of y = 6; sum over x of x = 1; sum of linear index 0..7 = 28.
  expect_allclose(sy, std::vector<double>(8, 6.0));
  expect_allclose(sx, std::vector<double>(8, 1.0));
  expect_allclose(sxy, std::vector<double>(8, 28.0));
}

TEST(ShardMapGrad, DataParallelGradientsEqualTheFullBatchGradient) {
  Mesh mesh = make_mesh({4}, {"data"});
  auto loss = [](const Array& w, const Array& x, const Array& y) { return mean(square(matmul(x, w) - y)); };
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> wv(6), xv(16 * 3), yv(16 * 2);
  for (float& v : wv) v = dist(gen);
  for (float& v : xv) v = dist(gen);
  for (float& v : yv) v = dist(gen);
  Buffer wb = Buffer::from_vector<float>(wv, {3, 2}), xb = Buffer::from_vector<float>(xv, {16, 3}),
         yb = Buffer::from_vector<float>(yv, {16, 2});
  Array full = grad(loss)(Array(wb), Array(xb), Array(yb));
  auto step = shard_map(
      [&](const Array& w, const Array& x, const Array& y) { return pmean(grad(loss)(w, x, y), "data"); }, mesh,
      {P(), P("data"), P("data")}, {P()});
  Array dp = step(Array(wb), Array(xb), Array(yb));
  expect_allclose(dp, full.to_host().to_doubles(), 1e-5, 1e-6);
}

TEST(ShardMap, ErrorsNameTheProblem) {
  Mesh mesh = make_mesh({4}, {"data"});
  EXPECT_THAT(error_of([] { psum(Array(1.0f), "data"); }), HasSubstr("unbound axis name 'data'"));
  auto bad_axis = shard_map([](const Array& x) { return psum(x, "model"); }, mesh, {P("data")}, {P()});
  EXPECT_THAT(error_of([&] { bad_axis(Array(grid(4, 1))); }), HasSubstr("unbound axis name 'model'"));
  auto f = shard_map([](const Array& x) { return x; }, mesh, {P("data")}, {P("data")});
  EXPECT_THAT(error_of([&] { f(Array(grid(6, 1))); }), HasSubstr("6"));
  EXPECT_THAT(error_of([&] { jit([&](const Array& x) { return f(x); })(Array(grid(6, 1))); }), HasSubstr("6"));
}

// ---- transfer guard at the API level ---------------------------------------------------------------

TEST(TransferGuardApi, ImplicitHostToDeviceIsCaughtExplicitPutIsNot) {
  auto f = jit([](const Array& x) { return x + 1.0f; }, {.name = "inc"});
  Buffer host = grid(2, 2);
  {
    TransferGuard guard(TransferDirection::kHostToDevice, TransferGuardLevel::kDisallow);
    std::string e = error_of([&] { f(Array(host)); });
    EXPECT_THAT(e, HasSubstr("host-to-device"));
    EXPECT_THAT(e, HasSubstr("implicit"));
    EXPECT_THAT(e, HasSubstr("f32[2,2]"));
    Array placed = device_put(host, devices()[0]);  // explicit: allowed
    EXPECT_NO_THROW(f(placed).block_until_ready());
    EXPECT_NO_THROW(f(placed) * 2.0f);  // C++ scalars are literals, not transfers
  }
  {
    TransferGuard guard(TransferGuardLevel::kDisallowExplicit);
    EXPECT_THAT(error_of([&] { device_put(host, devices()[0]); }), HasSubstr("explicit"));
  }
  EXPECT_NO_THROW(f(Array(host)).block_until_ready());  // scope left: allowed again
}

TEST(TransferGuardApi, HostDataGoingToAMeshIsHostToDeviceOnly) {
  Mesh mesh = make_mesh({4}, {"d"});
  auto g = jit([](const Array& x) { return x + 1.0f; }, {.name = "g", .in_shardings = {NamedSharding(mesh, P("d"))}});
  Buffer host = grid(4, 2);
  {
    TransferGuard guard(TransferDirection::kDeviceToDevice, TransferGuardLevel::kDisallow);
    EXPECT_NO_THROW(g(Array(host)).block_until_ready());  // not a device-to-device move
  }
  {
    TransferGuard guard(TransferDirection::kHostToDevice, TransferGuardLevel::kDisallow);
    std::string e = error_of([&] { g(Array(host)); });
    EXPECT_THAT(e, HasSubstr("host-to-device"));
    EXPECT_THAT(e, HasSubstr("jit of 'g' argument 0"));
  }
  testing_util::expect_allclose(g(Array(host)), [&] {
    std::vector<double> v = host.to_doubles();
    for (double& x : v) x += 1;
    return v;
  }());
}

TEST(TransferGuardApi, DeviceToHostAndDeviceToDevice) {
  Array on_device = device_put(grid(2, 2), devices()[1]);
  {
    TransferGuard guard(TransferDirection::kDeviceToHost, TransferGuardLevel::kDisallow);
    EXPECT_THAT(error_of([&] { (void)on_device.to_string(); }), HasSubstr("device-to-host"));
    EXPECT_THAT(error_of([&] { (void)on_device.to_vector<float>(); }), HasSubstr("implicit"));
    EXPECT_NO_THROW(device_get(on_device));  // explicit
    EXPECT_NO_THROW(on_device.to_host());    // explicit
  }
  {
    TransferGuard guard(TransferDirection::kDeviceToDevice, TransferGuardLevel::kDisallow);
    Array other = device_put(grid(2, 2), devices()[2]);
    Mesh mesh = make_mesh({2}, {"d"});
    auto g = jit([](const Array& x) { return x * 2.0f; },
                 {.name = "g", .in_shardings = {NamedSharding(mesh, P("d"))}});
    // on_device lives on cpu:1 only: running g moves it onto the mesh implicitly.
    EXPECT_THAT(error_of([&] { g(on_device); }), HasSubstr("device-to-device"));
    EXPECT_NO_THROW(device_put(other, NamedSharding(mesh, P("d"))));  // explicit reshard
  }
}

// ---- thread guard -----------------------------------------------------------------------------------

TEST(ThreadGuardApi, SpanningExecutableFromAnotherThreadIsAnError) {
  Mesh mesh = make_mesh({2}, {"d"});
  ir::Program p = trace([](const Array& x) { return x + 1.0f; }, AbstractValue{DType::kFloat32, concrete_shape({4})});
  SpmdOptions options(mesh);
  options.name = "spanning";
  options.in_specs = {P("d")};
  options.spans_processes = true;  // stands in for a mesh over several processes
  auto exe = value_or_throw(SpmdExecutable::compile(p, options));
  Array x = device_put(grid(1, 4).reshaped({4}), NamedSharding(mesh, P("d")));
  std::vector<ArrayValue> args = {x.value()};
  ThreadGuard guard;
  EXPECT_NO_THROW(value_or_throw(exe->execute(args)));  // owning thread
  std::string error;
  std::thread other([&] { error = error_of([&] { value_or_throw(exe->execute(args)); }); });
  other.join();
  EXPECT_THAT(error, HasSubstr("spanning"));
  EXPECT_THAT(error, HasSubstr("thread"));
  // A non-spanning computation from another thread is fine.
  std::string none;
  std::thread ok([&] { none = error_of([&] { (x + 1.0f).block_until_ready(); }); });
  ok.join();
  EXPECT_EQ(none, "<no exception>");
}

}  // namespace
}  // namespace mcx
