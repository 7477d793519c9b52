// Devices of the process: counts and fields, set_cpu_device_count, the multi-process topology, and a
// clean process exit while stream work is still queued. Tests that need a process whose devices do not
// exist yet run in a child process (a "threadsafe" death test re-executes this binary).
#include "mcx/runtime/device.h"

#include <atomic>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/core/topology.h"
#include "mcx/runtime/stream.h"
#include "tests/support/child_check.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// The count this test executable was started with (CMake sets MCX_CPU_DEVICE_COUNT=8 for it).
int configured_device_count() {
  const char* v = std::getenv("MCX_CPU_DEVICE_COUNT");
  return v && *v ? std::atoi(v) : 1;
}

class DeviceChildTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST(DeviceTest, SingleProcessDevicesHaveDenseIdsOnProcessZero) {
  const int n = configured_device_count();
  ASSERT_EQ(static_cast<int>(devices().size()), n);
  ASSERT_EQ(static_cast<int>(local_devices().size()), n);
  EXPECT_EQ(device_count(), n);
  EXPECT_EQ(local_device_count(), n);
  EXPECT_EQ(process_index(), 0);
  EXPECT_EQ(process_count(), 1);
  for (int i = 0; i < n; ++i) {
    const Device& d = local_devices()[i];
    EXPECT_EQ(d.global_id, i);
    EXPECT_EQ(d.local_id, i);
    EXPECT_EQ(d.process_index, 0);
    EXPECT_EQ(d.platform, "cpu");
    EXPECT_EQ(d.kind, "cpu");
    EXPECT_EQ(d.to_string(), "cpu:" + std::to_string(i));
    EXPECT_TRUE(d.is_addressable());
    EXPECT_EQ(devices()[i], d);
    EXPECT_EQ(stream_for(d).name(), d.to_string());
  }
  EXPECT_EQ(default_device(), local_devices()[0]);
  EXPECT_TRUE(devices_used());
}

// jax.local_devices(process_index=...): the process's own devices for its index, an error naming the range else.
TEST(DeviceTest, LocalDevicesOfAProcessIndex) {
  EXPECT_EQ(local_devices(process_index()), local_devices());
  try {
    (void)local_devices(process_count());
    ADD_FAILURE() << "a process index outside the job was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("[local_devices] expected a process index in [0, 1), got 1"));
  }
  EXPECT_THROW((void)local_devices(-1), InvalidArgument);
}

// A ProcessFailure names the failed process's devices (JAX's failed_devices), from the job's topology.
TEST(DeviceTest, AProcessFailureNamesTheFailedProcesssDevices) {
  (void)local_devices();  // the runtime (and its resolver) exists
  try {
    throw_if_error(mark_process_failure(absl::UnavailableError("[test] gone"), process_index()));
    ADD_FAILURE() << "nothing thrown";
  } catch (const ProcessFailure& e) {
    std::vector<int> ids;
    for (const Device& d : local_devices()) ids.push_back(d.global_id);
    EXPECT_EQ(e.failed_device_ids(), ids);
    EXPECT_EQ(failed_devices(e), local_devices());
  }
}

TEST(DeviceTest, ListsAreStableAcrossThreads) {
  std::vector<const std::vector<Device>*> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&seen, t] { seen[t] = &devices(); });
  for (auto& th : threads) th.join();
  for (const auto* p : seen) EXPECT_EQ(p, &devices());
}

TEST(DeviceTest, SetCpuDeviceCountAfterFirstUseThrows) {
  ASSERT_FALSE(devices().empty());
  try {
    set_cpu_device_count(4);
    FAIL() << "expected FailedPrecondition";
  } catch (const FailedPrecondition& e) {
    EXPECT_THAT(e.what(), HasSubstr("[set_cpu_device_count]"));
    EXPECT_THAT(e.what(), HasSubstr("already created"));
  }
  EXPECT_EQ(device_count(), configured_device_count());
}

TEST(DeviceTest, SetCpuDeviceCountRejectsBadCounts) {
  EXPECT_THROW(set_cpu_device_count(0), InvalidArgument);
  EXPECT_THROW(set_cpu_device_count(-3), InvalidArgument);
  try {
    set_cpu_device_count(1025);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("got 1025"));
  }
}

TEST(DeviceTest, StreamForDeviceOfAnotherProcessThrows) {
  Device other{/*global_id=*/9999, /*process_index=*/1, /*local_id=*/0, "cpu", "cpu"};
  EXPECT_FALSE(other.is_addressable());
  try {
    stream_for(other);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("cpu:9999 of process 1"));
  }
}

TEST_F(DeviceChildTest, SetCpuDeviceCountBeforeFirstUseWinsOverEnvironment) {
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "8", 1);
        set_cpu_device_count(3);
        CHILD_CHECK(device_count() == 3);
        CHILD_CHECK(local_devices().back().to_string() == "cpu:2");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(DeviceChildTest, McxPlatformsIsCheckedWhenDevicesAreMade) {
  EXPECT_EXIT(
      {
        setenv("MCX_PLATFORMS", " cpu ", 1);
        CHILD_CHECK(device_count() >= 1);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // The expected messages are regular expressions.
  const std::pair<const char*, const char*> bad[] = {
      {"rocm", R"(MCX_PLATFORMS='rocm': \[platform\] no platform 'rocm' in this build \(registered: cpu[, a-z]*\))"},
      {"cpu,cpu", "MCX_PLATFORMS='cpu,cpu' names 'cpu' twice"},
      {"cpu,", "MCX_PLATFORMS='cpu,': expected platform names separated by commas, found an empty name"},
  };
  for (const auto& [list, message] : bad) {
    EXPECT_EXIT(
        {
          setenv("MCX_PLATFORMS", list, 1);
          try {
            devices();
          } catch (const Error& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            std::exit(3);
          }
          std::exit(0);
        },
        ::testing::ExitedWithCode(3), message);
  }
}

TEST_F(DeviceChildTest, EnvironmentCountIsUsedAndValidated) {
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "5", 1);
        CHILD_CHECK(device_count() == 5);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  for (const char* bad : {"0", "1025", "abc"}) {
    EXPECT_EXIT(
        {
          setenv("MCX_CPU_DEVICE_COUNT", bad, 1);
          try {
            devices();
          } catch (const InvalidArgument& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            std::exit(3);
          }
          std::exit(0);
        },
        ::testing::ExitedWithCode(3), std::string("MCX_CPU_DEVICE_COUNT=") + bad);
  }
}

TEST_F(DeviceChildTest, MultiProcessTopologyGivesGlobalAndLocalDevices) {
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "3", 1);
        Topology t;
        t.process_index = 1;
        t.process_count = 2;
        for (int g = 0; g < 6; ++g) t.devices.push_back(TopologyDevice{g, g / 3, g % 3, "cpu", "cpu"});
        CHILD_CHECK(set_distributed_topology(t).ok());
        CHILD_CHECK(device_count() == 6);
        CHILD_CHECK(local_device_count() == 3);
        CHILD_CHECK(process_index() == 1);
        CHILD_CHECK(process_count() == 2);
        for (int i = 0; i < 3; ++i) {
          const Device& d = local_devices()[i];
          CHILD_CHECK(d.global_id == 3 + i && d.local_id == i && d.process_index == 1);
          CHILD_CHECK(d.is_addressable());
          CHILD_CHECK(!devices()[i].is_addressable());
          CHILD_CHECK(stream_for(d).name() == "cpu:" + std::to_string(3 + i));
        }
        CHILD_CHECK(default_device().global_id == 3);
        bool threw = false;
        try {
          stream_for(devices()[0]);
        } catch (const InvalidArgument&) {
          threw = true;
        }
        CHILD_CHECK(threw);
        // Devices exist now: a topology can no longer be installed.
        clear_distributed_topology();
        CHILD_CHECK(!set_distributed_topology(t).ok());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(DeviceChildTest, TopologyLocalCountWinsOverConfiguredCount) {
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "4", 1);
        Topology t;
        t.process_index = 0;
        t.process_count = 2;
        for (int g = 0; g < 4; ++g) t.devices.push_back(TopologyDevice{g, g < 2 ? 0 : 1, g % 2, "cpu", "cpu"});
        CHILD_CHECK(set_distributed_topology(t).ok());
        CHILD_CHECK(local_device_count() == 2);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "using the topology's 2");
}

TEST_F(DeviceChildTest, ExitWithQueuedStreamWorkDrainsAndJoins) {
  // exit() while stream 0 runs a task and more are queued on two streams: the exit handler lets every
  // stream finish its queue (the last task prints) and joins the threads; the process exits with 0.
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "2", 1);
        std::atomic<int> ran{0};
        stream_for(local_devices()[0]).enqueue([&ran] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // still running at exit()
          ran.fetch_add(1);
        });
        stream_for(local_devices()[1]).enqueue([&ran] { ran.fetch_add(1); });
        stream_for(local_devices()[0]).enqueue([&ran] {
          std::fprintf(stderr, "last task ran after %d others\n", ran.load());
        });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "last task ran after 2 others");
}

TEST_F(DeviceChildTest, ExitFromAStreamTaskDoesNotHang) {
  EXPECT_EXIT(
      {
        setenv("MCX_CPU_DEVICE_COUNT", "2", 1);
        Stream& s = stream_for(local_devices()[1]);
        s.enqueue([] {
          std::fprintf(stderr, "exiting from the stream thread\n");
          std::exit(7);
        });
        (void)s.synchronize(absl::Now() + absl::Seconds(30));
        std::exit(1);  // not reached: the task exits the process first
      },
      ::testing::ExitedWithCode(7), "exiting from the stream thread");
}

}  // namespace
}  // namespace mcx
