// mcx::live_devices with real processes: the survivors of a kill -9 agree on the smaller live set (a newer
// generation, the same on all of them) and compute over a mesh of it. Processes 0..n-1, one device each.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

struct Case {
  int processes, victim;
};
class LiveDevicesAcrossProcesses : public ::testing::TestWithParam<Case> {};

// Killing any process, process 0 included (the coordinator runs apart from the workers).
TEST_P(LiveDevicesAcrossProcesses, SurvivorsAgreeOnTheSmallerSetAndComputeOnIt) {
  const int n = GetParam().processes, victim = GetParam().victim;
  const int all = n * (n + 1) / 2;  // sum of the device ids + 1
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {live_devices_worker_path(), std::to_string(victim)},
                            Harness::worker_env(address, n, id, {{"MCX_CPU_DEVICE_COUNT", "1"}})));
  }
  for (int id = 0; id < n; ++id) {
    if (id == victim) continue;
    ASSERT_TRUE(h.wait_output(procs[id], "DONE", milliseconds(30000))) << h.dump(procs[id]);
    const std::string& o = h.out(procs[id]);
    EXPECT_THAT(o, HasSubstr("LIVE 1 generation=1 processes=" + process_ids(n, -1) + " devices=" + std::to_string(n) +
                             " sum=" + std::to_string(all)))
        << h.dump(procs[id]);
    EXPECT_THAT(o, HasSubstr("LIVE 2 generation=2 processes=" + process_ids(n, victim) + " devices=" + std::to_string(n - 1) +
                             " sum=" + std::to_string(all - (victim + 1))))
        << h.dump(procs[id]);
  }
}

INSTANTIATE_TEST_SUITE_P(Victims, LiveDevicesAcrossProcesses,
                         ::testing::Values(Case{2, 1}, Case{3, 0}, Case{3, 2}, Case{4, 1}), [](const auto& i) {
                           return std::to_string(i.param.processes) + "_processes_kill_" + std::to_string(i.param.victim);
                         });

}  // namespace
}  // namespace mcx::mptest
