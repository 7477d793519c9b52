// The coordinator is not a single point of failure of a recoverable job: kill -9 of mcx-coordinator while three
// workers run barriers, KV reads and writes and live-set agreements in a loop (mp_worker churn), then
// mcx-coordinator started again on the same port: the workers rejoin it and carry on, what they published is
// there again, and all end with exit 0. If it does not come back, they fail after the reconnect timeout naming it.
#include <signal.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;

constexpr int kFailureExit = 43;  // mcx::distributed::kFailureExitCode
const std::vector<std::string> kCoordinatorFlags = {"--recoverable", "--heartbeat-timeout", "2"};

Env recoverable_env(const std::string& reconnect_timeout_s) {
  return {{"MCX_RECOVERABLE", "1"},
          {"MCX_HEARTBEAT_INTERVAL", "0.2"},
          {"MCX_HEARTBEAT_TIMEOUT", "2"},
          {"MCX_COORDINATOR_RECONNECT_TIMEOUT", reconnect_timeout_s}};
}

std::vector<int> start_churn(Harness& h, const std::string& addr, int n, const std::string& rounds_after,
                             const Env& env) {
  std::vector<int> w;
  for (int i = 0; i < n; ++i) {
    w.push_back(h.spawn("task" + std::to_string(i), {worker_path(), "churn", rounds_after},
                        Harness::worker_env(addr, n, i, env)));
  }
  return w;
}

bool err_has(Harness& h, int i, const std::string& needle) { return h.err(i).find(needle) != std::string::npos; }

TEST(CoordinatorRestart, ARecoverableJobCarriesOnAcrossAKilledAndRestartedCoordinator) {
  Harness h;
  const std::string addr = h.start_coordinator(3, kCoordinatorFlags);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w = start_churn(h, addr, 3, "30", recoverable_env("10"));
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "LOOPING", milliseconds(15000))) << h.dump_all();

  const int first = h.coordinator_index();
  const auto killed_at = Clock::now();
  h.kill9(first);
  ASSERT_TRUE(h.wait_exit(first, milliseconds(5000)));
  for (int i : w) {
    ASSERT_TRUE(h.run_until([&] { return err_has(h, i, "rejoining it for up to 10s"); }, milliseconds(5000)))
        << h.dump(i);
  }
  h.run_until([] { return false; }, milliseconds(1000));  // a second without any coordinator
  const auto restarted_at = Clock::now();
  ASSERT_EQ(h.start_coordinator(3, kCoordinatorFlags, addr), addr) << h.dump_all();
  for (int i : w) {
    ASSERT_TRUE(h.run_until([&] { return err_has(h, i, "rejoined the coordination service"); }, milliseconds(10000)))
        << h.dump_all();
  }
  const auto rejoined_at = Clock::now();
  std::printf("workers without a coordinator for %.3f s; all rejoined %.3f s after it was started again\n",
              seconds_between(killed_at, restarted_at), seconds_between(restarted_at, rejoined_at));
  EXPECT_LT(seconds_between(restarted_at, rejoined_at), 4.0);

  // A restarted process's first read, against the new coordinator: every process's topology entry is back.
  int ls = h.spawn("mcx-ctl ls", {tool_path("mcx-ctl"), "--coordinator", addr, "kv", "ls", "mcx/task"});
  ASSERT_TRUE(h.wait_exit(ls, milliseconds(10000))) << h.dump(ls);
  EXPECT_EQ(h.exit_code(ls), 0) << h.dump(ls);
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(h.out(ls), '\n', absl::SkipEmpty())) {
    if (absl::StrContains(line, "/topology\t")) lines.emplace_back(line);
  }
  ASSERT_EQ(lines.size(), 3u) << h.dump(ls);
  for (int p = 0; p < 3; ++p) {
    EXPECT_THAT(lines[p], ::testing::StartsWith("mcx/task/" + std::to_string(p) + "/topology\t"));
  }

  ASSERT_TRUE(h.wait_exits(w, milliseconds(20000))) << h.dump_all();
  for (int i : w) {
    EXPECT_EQ(h.exit_code(i), 0) << h.dump(i);
    EXPECT_THAT(h.out(i), HasSubstr("rejoins=1")) << h.dump(i);
    EXPECT_THAT(h.out(i), HasSubstr("TOPOLOGY 3")) << h.dump(i);
    // The restarted coordinator numbers live sets above the generation the workers had seen.
    EXPECT_THAT(h.out(i), HasSubstr("GENERATIONS 1 2\n")) << h.dump(i);
    EXPECT_THAT(h.out(i), HasSubstr("DONE")) << h.dump(i);
  }
  int st = h.spawn("mcx-ctl status", {tool_path("mcx-ctl"), "--coordinator", addr, "status"});
  ASSERT_TRUE(h.wait_exit(st, milliseconds(10000))) << h.dump(st);
  EXPECT_THAT(h.out(st), HasSubstr("rebuilt after a coordinator restart: tasks [0,1,2] rejoined")) << h.dump(st);
  EXPECT_THAT(h.err(h.coordinator_index()), HasSubstr("CONNECTED (incarnation")) << h.dump(h.coordinator_index());
  EXPECT_THAT(h.err(h.coordinator_index()), HasSubstr(") rejoined")) << h.dump(h.coordinator_index());
}

TEST(CoordinatorRestart, WorkersFailNamingTheCoordinatorWhenItDoesNotComeBack) {
  Harness h;
  const std::string addr = h.start_coordinator(3, kCoordinatorFlags);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w = start_churn(h, addr, 3, "1000000", recoverable_env("2"));
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "LOOPING", milliseconds(15000))) << h.dump_all();
  const auto killed_at = Clock::now();
  h.kill9(h.coordinator_index());
  ASSERT_TRUE(h.wait_exits(w, milliseconds(15000))) << h.dump_all();
  for (int i : w) {
    const double took = seconds_between(killed_at, h.proc(i).exited);
    std::printf("%s exited %.3f s after kill -9 of the coordinator (reconnect timeout 2 s)\n",
                h.proc(i).name.c_str(), took);
    EXPECT_EQ(h.exit_code(i), kFailureExit) << h.dump(i);
    EXPECT_THAT(h.err(i), HasSubstr("lost the coordination service at " + addr + ": could not rejoin it within 2s"))
        << h.dump(i);
    // The workers time their 2 s window from when they notice the loss; the harness timestamps the kill and
    // the exits on its own clock, and measured 1.993-1.995 s once (CI): 50 ms of timer slack is allowed.
    EXPECT_GE(took, 2.0 - 0.05) << h.dump(i);
    EXPECT_LT(took, 2.0 + 3.0) << h.dump(i);
  }
}

// mcx-run supervises the coordinator of a recoverable job: killed with kill -9 while three workers churn, it is
// started again on the same address, the workers rejoin it, and the job ends with exit 0 (before, mcx-run ended
// every process when its coordinator died).
TEST(CoordinatorRestart, McxRunRestartsTheCoordinatorOfARecoverableJob) {
  Harness h;
  const int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--recoverable", "--verbose", "--heartbeat-interval",
                                    "0.2", "--heartbeat-timeout", "2", "--timeout", "90", "--", worker_path(), "churn", "30"},
                        {{"MCX_COORDINATOR_RECONNECT_TIMEOUT", "10"}});
  for (int p = 0; p < 3; ++p) {
    ASSERT_TRUE(h.wait_output(r, "[p" + std::to_string(p) + "] LOOPING", milliseconds(20000))) << h.dump(r);
  }
  const std::regex at(R"(coordinator at (\S+) \(pid (\d+)\))");
  std::smatch m;
  const std::string err = h.err(r);
  ASSERT_TRUE(std::regex_search(err, m, at)) << h.dump(r);
  const std::string address = m[1];
  ASSERT_EQ(::kill(static_cast<pid_t>(std::stoi(m[2])), SIGKILL), 0);
  ASSERT_TRUE(h.wait_exit(r, milliseconds(60000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("the coordinator exited (killed by signal 9")) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("starting it again on " + address + " (restart 1 of 3): the processes of this "
                                  "recoverable job rejoin it"))
      << h.dump(r);
  for (int p = 0; p < 3; ++p) {
    EXPECT_THAT(h.out(r), HasSubstr("[p" + std::to_string(p) + "] CHURN DONE")) << h.dump(r);
  }
  EXPECT_THAT(h.out(r), HasSubstr("rejoins=1")) << h.dump(r);
}

}  // namespace
}  // namespace mcx::mptest
