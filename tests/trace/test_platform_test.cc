// The test-only platform (tests/support/test_platform.h) from outside: a process that selects it runs arrays,
// eager ops, jit and SPMD on its devices, every host read of its memory is a counted copy through its
// to_host, and device_put between it and the CPU goes through host memory, seen by the transfer guard as a
// device-to-host and a host-to-device transfer. Each test selects the platform itself, in a child process.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/runtime/transfer_guard.h"
#include "tests/support/child_check.h"
#include "tests/support/test_platform.h"

namespace mcx {
namespace {

class TestPlatform : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(TestPlatform, ArraysLiveInItsMemoryAndEveryReadIsACountedCopy) {
  EXPECT_EXIT(
      {
        setenv("MCX_PLATFORMS", "test", 1);
        CHILD_CHECK(default_platform() == "test");
        CHILD_CHECK(devices()[0].platform == "test" && devices()[0].to_string() == "test:0");
        const test::TestPlatformCounts before = test::test_platform_counts();
        Array x = array({1.0f, 2.0f, 3.0f});
        Array y = exp(x) * x;  // eager: two executions on test:0
        auto f = jit([](const Array& a) { return a * a + a; });
        const std::vector<float> got = f(y).to_vector<float>();
        const test::TestPlatformCounts after = test::test_platform_counts();
        CHILD_CHECK(got.size() == 3);
        for (int i = 0; i < 3; ++i) {
          const double v = std::exp(1.0 + i) * (1.0 + i);
          CHILD_CHECK(std::abs(got[i] - (v * v + v)) <= 1e-5 * (v * v + v));
        }
        CHILD_CHECK(after.host_to_device - before.host_to_device >= 1);  // x onto test:0
        CHILD_CHECK(after.device_to_host - before.device_to_host >= 1);  // the result read back
        CHILD_CHECK(after.executions - before.executions >= 3);
        CHILD_CHECK(after.compiles - before.compiles >= 2);
        CHILD_CHECK(y.sharding().device_set().front().platform == "test");
        bool refused = false;
        try {
          devices("cpu");
        } catch (const NotFound& e) {
          refused = std::string(e.what()).find("selected platforms are test") != std::string::npos;
        }
        CHILD_CHECK(refused);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(TestPlatform, SpmdOverItsDevicesMatchesTheHostResult) {
  EXPECT_EXIT(
      {
        setenv("MCX_PLATFORMS", "test", 1);
        setenv("MCX_CPU_DEVICE_COUNT", "4", 1);
        const Mesh mesh = make_mesh({4}, {"data"});
        std::vector<float> host(16);
        for (int i = 0; i < 16; ++i) host[i] = 0.25f * i - 1.0f;
        Array x = device_put(Buffer::from_vector<float>(host, {8, 2}), NamedSharding(mesh, P("data", None)));
        auto total = jit([](const Array& a) { return sum(a * a); });
        const double got = total(x).item<float>();
        double want = 0;
        for (float v : host) want += static_cast<double>(v) * v;
        CHILD_CHECK(std::abs(got - want) <= 1e-5 * want);
        CHILD_CHECK(x.addressable_shards().size() == 4);
        CHILD_CHECK(x.addressable_shards()[3].device.to_string() == "test:3");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(TestPlatform, DevicePutBetweenPlatformsGoesThroughHostMemoryAndTheGuardSeesIt) {
  EXPECT_EXIT(
      {
        setenv("MCX_PLATFORMS", "test,cpu", 1);
        setenv("MCX_CPU_DEVICE_COUNT", "2", 1);
        CHILD_CHECK(default_platform() == "test");
        CHILD_CHECK(devices().size() == 2 && devices("cpu").size() == 2);
        const Device& cpu0 = devices("cpu")[0];
        CHILD_CHECK(cpu0.platform == "cpu" && cpu0.global_id == 2 && cpu0.is_addressable());
        Array x = array({4.0f, 5.0f});
        const test::TestPlatformCounts before = test::test_platform_counts();
        Array on_cpu = device_put(x * x, cpu0);
        CHILD_CHECK(on_cpu.sharding().device_set().front() == cpu0);
        CHILD_CHECK((exp(on_cpu) - exp(on_cpu)).to_vector<float>() == std::vector<float>({0.0f, 0.0f}));
        CHILD_CHECK(on_cpu.to_vector<float>() == std::vector<float>({16.0f, 25.0f}));
        CHILD_CHECK(test::test_platform_counts().device_to_host - before.device_to_host >= 1);
        Array back = device_put(on_cpu, devices()[1]);
        CHILD_CHECK(back.sharding().device_set().front().to_string() == "test:1");
        CHILD_CHECK(back.to_vector<float>() == std::vector<float>({16.0f, 25.0f}));
        // Between platforms is through the host: device-to-host is what the guard refuses here.
        bool refused = false;
        {
          TransferGuard guard(TransferDirection::kDeviceToHost, TransferGuardLevel::kDisallowExplicit);
          try {
            device_put(back, cpu0);
          } catch (const TransferGuardError& e) {
            refused = std::string(e.what()).find("device-to-host") != std::string::npos;
          }
        }
        CHILD_CHECK(refused);
        {  // and within one platform it stays a device-to-device copy, which this guard allows
          TransferGuard guard(TransferDirection::kDeviceToHost, TransferGuardLevel::kDisallowExplicit);
          CHILD_CHECK(device_put(back, devices()[0]).sharding().device_set().front().to_string() == "test:0");
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace mcx
