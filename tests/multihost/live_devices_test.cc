// mcx::live_devices and mcx::with_live_devices in one process (no coordination service): every device is
// live, the generation is 1, the scope returns its body's result and propagates its exception unchanged.
#include "mcx/multihost/live_devices.h"

#include <stdexcept>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

TEST(LiveDevicesOneProcess, EveryDeviceIsLiveAndTheGenerationStays) {
  const LiveDevices a = live_devices(devices());
  const LiveDevices b = live_devices(devices());
  EXPECT_EQ(a.devices.size(), devices().size());
  EXPECT_EQ(a.processes, std::vector<int>{0});
  EXPECT_EQ(a.generation, 1u);
  EXPECT_EQ(b.generation, a.generation);  // the same live set keeps its number
}

TEST(LiveDevicesOneProcess, TheScopeReturnsItsBodysResultOverAMeshOfTheLiveDevices) {
  const int64_t n = static_cast<int64_t>(devices().size());  // 4 under ctest
  for (int k = 0; k < 3; ++k) {
    const float sum = with_live_devices(devices(), [](const LiveDevices& live) {
      const Mesh mesh = make_mesh({static_cast<int64_t>(live.devices.size())}, {"i"}, live.devices);
      const Array x = device_put(arange(static_cast<int64_t>(live.devices.size()), DType::kFloat32),
                                 NamedSharding(mesh, P("i")));
      auto total = shard_map([](const Array& v) { return psum(v, "i"); }, mesh, {P("i")}, {P()}, "scope_sum");
      return total(x).item<float>();
    });
    EXPECT_EQ(sum, static_cast<float>(n * (n - 1) / 2));  // 0 + 1 + ... over n devices
  }
  int ran = 0;
  with_live_devices(devices(), [&](const LiveDevices&) { ++ran; });  // a void body
  EXPECT_EQ(ran, 1);
}

TEST(LiveDevicesOneProcess, TheBodysExceptionLeavesTheScopeUnchanged) {
  EXPECT_THROW(with_live_devices(devices(), [](const LiveDevices&) -> int { throw std::runtime_error("mine"); }),
               std::runtime_error);
  try {
    with_live_devices(devices(), [](const LiveDevices&) { throw InvalidArgument("[test] bad input"); });
    FAIL() << "expected the body's exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad input"));
  }
  // The next scope runs normally.
  EXPECT_EQ(with_live_devices(devices(), [](const LiveDevices& live) { return live.generation; }), 1u);
}

TEST(LiveDevicesOneProcess, ScopesDoNotNest) {
  try {
    with_live_devices(devices(), [](const LiveDevices&) { with_live_devices(devices(), [](const LiveDevices&) {}); });
    FAIL() << "expected the nested scope to be refused";
  } catch (const FailedPrecondition& e) {
    EXPECT_THAT(e.what(), HasSubstr("a scope is already running"));
  }
  EXPECT_EQ(with_live_devices(devices(), [](const LiveDevices&) { return 7; }), 7);  // usable again
}

TEST(LiveDevicesOneProcess, DevicesOfNoProcessOfOursAreRefused) {
  EXPECT_THROW(live_devices({}), InvalidArgument);
  EXPECT_THROW(with_live_devices({}, [](const LiveDevices&) {}), InvalidArgument);
}

}  // namespace
}  // namespace mcx
