// A process killed (kill -9) while the others wait for it at each blocking point of the control plane:
// registration, a barrier, a live-set agreement. In a fate-sharing job every other process ends within a second,
// naming it; in a recoverable job every other process is told within a second (a barrier fails naming it, a
// live-set agreement completes without it). 3 processes, the victim process 0 or 1 (the coordinator runs apart from them).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

constexpr int kProcesses = 3;

enum class Point { kRegistration, kBarrier, kLiveSet };

struct Case {
  Point point;
  bool recoverable;
  int victim;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const char* point[] = {"registration", "barrier", "live_set"};
  return std::string(point[static_cast<int>(i.param.point)]) + (i.param.recoverable ? "_recoverable" : "_fate_sharing") +
         "_kill_" + std::to_string(i.param.victim);
}

class FailurePoints : public ::testing::TestWithParam<Case> {};

TEST_P(FailurePoints, EveryOtherProcessLearnsOfAKillWithinASecond) {
  const Case c = GetParam();
  Harness h;
  std::vector<std::string> flags;
  if (c.recoverable) flags.push_back("--recoverable");
  const std::string address = h.start_coordinator(kProcesses, flags);
  ASSERT_FALSE(address.empty());
  // Registration: the last process starts only after the kill, so the others are still waiting to register.
  const int first_batch = c.point == Point::kRegistration ? kProcesses - 1 : kProcesses;
  auto spawn = [&](int id) {
    std::vector<std::string> argv = {worker_path()};
    switch (c.point) {
      case Point::kRegistration: argv.insert(argv.end(), {"wait", "3"}); break;
      case Point::kBarrier: argv.insert(argv.end(), {"stuck", std::to_string(c.victim), "30"}); break;
      case Point::kLiveSet: argv.insert(argv.end(), {"live_set", std::to_string(c.victim), "30"}); break;
    }
    Env env{{"MCX_HEARTBEAT_TIMEOUT", "30"}};  // detection must not rely on heartbeats
    if (c.recoverable) env["MP_WORKER_NOTICE"] = "1";
    return h.spawn("task" + std::to_string(id), argv, Harness::worker_env(address, kProcesses, id, env));
  };
  std::vector<int> procs(kProcesses, -1);
  for (int id = 0; id < first_batch; ++id) procs[id] = spawn(id);
  const std::string waiting = c.point == Point::kRegistration ? "STARTING" : "READY";
  for (int id = 0; id < first_batch; ++id) {
    ASSERT_TRUE(h.wait_output(procs[id], waiting, milliseconds(15000))) << h.dump_all();
  }
  // Let the others reach the blocking call (registration RPC, barrier, agreement) before the kill.
  h.run_until([] { return false; }, milliseconds(500));
  const auto killed_at = Clock::now();
  h.kill9(procs[c.victim]);
  if (c.point == Point::kRegistration && c.recoverable) procs[kProcesses - 1] = spawn(kProcesses - 1);
  const std::string victim = "task " + std::to_string(c.victim);
  for (int id = 0; id < kProcesses; ++id) {
    if (id == c.victim || procs[id] < 0) continue;
    if (!c.recoverable) {
      ASSERT_TRUE(h.wait_exit(procs[id], milliseconds(10000))) << h.dump(procs[id]);
      const double took = seconds_between(killed_at, h.proc(procs[id]).exited);
      std::printf("task %d ended %.3f s after the kill of %s\n", id, took, victim.c_str());
      EXPECT_LT(took, 1.0) << h.dump(procs[id]);
      EXPECT_NE(h.exit_code(procs[id]), 0) << h.dump(procs[id]);
      EXPECT_THAT(h.out(procs[id]) + h.err(procs[id]), HasSubstr(victim)) << h.dump(procs[id]);
      continue;
    }
    // A recoverable barrier fails at once naming the dead participant (it never waits for a task the service
    // declared dead); the other points tell the survivors through the failure notice.
    const std::string told = c.point == Point::kLiveSet   ? "LIVE tasks="
                             : c.point == Point::kBarrier ? "cannot pass: " + victim + " has failed"
                                                          : "NOTICE " + victim + " failed";
    ASSERT_TRUE(h.wait_output(procs[id], told, milliseconds(10000))) << h.dump(procs[id]);
    const double took = seconds_between(killed_at, Clock::now());
    std::printf("task %d was told %.3f s after the kill of %s\n", id, took, victim.c_str());
    EXPECT_LT(took, 1.0) << h.dump(procs[id]);
    if (c.point == Point::kLiveSet) {
      EXPECT_THAT(h.out(procs[id]), HasSubstr(c.victim == 0 ? "LIVE tasks=1,2" : "LIVE tasks=0,2")) << h.dump(procs[id]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Points, FailurePoints,
    ::testing::Values(Case{Point::kRegistration, false, 1}, Case{Point::kRegistration, true, 0},
                      Case{Point::kBarrier, false, 0}, Case{Point::kBarrier, true, 1},
                      Case{Point::kLiveSet, false, 1}, Case{Point::kLiveSet, true, 0}),
    case_name);

}  // namespace
}  // namespace mcx::mptest
