// Preemption sync points with real processes and real SIGTERMs: every process of the job, each at its own
// step and speed, stops at the same sync step and exits 0, whichever process is sent SIGTERM; a process killed
// with -9 is not waited for; notify_preemption() works as a SIGTERM; SIGTERM to mcx-run reaches every worker; a
// program without a job stops at its next step.
#include <signal.h>

#include <regex>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

std::string preemption_worker_path() { return MCX_TEST_PREEMPTION_WORKER; }

// The step of the "SYNC step=<s>" line in `out` (after an optional "[pN] " prefix), or -1.
long sync_step(const std::string& out, const std::string& prefix = "") {
  std::smatch m;
  const std::regex re(std::regex_replace(prefix, std::regex(R"([\[\]])"), R"(\$&)") + R"(SYNC step=(\d+))");
  return std::regex_search(out, m, re) ? std::stol(m[1].str()) : -1;
}

struct Case {
  int processes, victim;
};
class PreemptionAcrossProcesses : public ::testing::TestWithParam<Case> {};

TEST_P(PreemptionAcrossProcesses, EveryProcessStopsAtTheSameSyncStep) {
  const int n = GetParam().processes, victim = GetParam().victim;
  Harness h;
  const std::string address = h.start_coordinator(n);
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {preemption_worker_path(), "job", "5"},
                            Harness::worker_env(address, n, id)));
  }
  for (int p : procs) ASSERT_TRUE(h.wait_output(p, "READY", milliseconds(10000))) << h.dump(p);
  h.run_until([] { return false; }, milliseconds(200));  // let them step apart
  ASSERT_EQ(::kill(h.proc(procs[victim]).sub->pid(), SIGTERM), 0);
  ASSERT_TRUE(h.wait_exits(procs, milliseconds(15000))) << h.dump_all();
  const long step = sync_step(h.out(procs[0]));
  EXPECT_GT(step, 0) << h.dump_all();
  for (int p : procs) {
    EXPECT_EQ(h.exit_code(p), 0) << h.dump(p);
    EXPECT_EQ(sync_step(h.out(p)), step) << h.dump(p);
  }
  EXPECT_THAT(h.err(procs[victim]), HasSubstr("received SIGTERM")) << h.dump(procs[victim]);
}

INSTANTIATE_TEST_SUITE_P(Victims, PreemptionAcrossProcesses,
                         ::testing::Values(Case{2, 1}, Case{3, 0}, Case{4, 2}), [](const auto& i) {
                           return std::to_string(i.param.processes) + "_processes_sigterm_" +
                                  std::to_string(i.param.victim);
                         });

// A recoverable job: process 1 is killed with -9, then process 2 gets SIGTERM; the survivors agree without it.
TEST(PreemptionAcrossProcessesRecoverable, AKilledProcessIsNotWaitedFor) {
  const int n = 3;
  Harness h;
  const std::string address = h.start_coordinator(n, {"--recoverable"});
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {preemption_worker_path(), "job", "5", "recoverable"},
                            Harness::worker_env(address, n, id, {{"MCX_RECOVERABLE", "1"}})));
  }
  for (int p : procs) ASSERT_TRUE(h.wait_output(p, "READY", milliseconds(10000))) << h.dump(p);
  h.kill9(procs[1]);
  ASSERT_TRUE(h.wait_output(procs[0], "NOTE task 1 failed", milliseconds(5000))) << h.dump_all();
  ASSERT_EQ(::kill(h.proc(procs[2]).sub->pid(), SIGTERM), 0);
  ASSERT_TRUE(h.wait_exits({procs[0], procs[2]}, milliseconds(15000))) << h.dump_all();
  const long step = sync_step(h.out(procs[0]));
  EXPECT_GT(step, 0) << h.dump_all();
  for (int p : {procs[0], procs[2]}) {
    EXPECT_EQ(h.exit_code(p), 0) << h.dump(p);
    EXPECT_EQ(sync_step(h.out(p)), step) << h.dump(p);
    EXPECT_THAT(h.err(p), HasSubstr("agreed by processes {0,2}")) << h.dump(p);
  }
}

// No signal: the last process calls notify_preemption() (a scheduler's own channel).
TEST(PreemptionAcrossProcessesNotify, NotifyPreemptionStopsEveryProcess) {
  const int n = 2;
  Harness h;
  const std::string address = h.start_coordinator(n);
  ASSERT_FALSE(address.empty());
  std::vector<int> procs;
  for (int id = 0; id < n; ++id) {
    procs.push_back(h.spawn("p" + std::to_string(id), {preemption_worker_path(), "job", "5", "notify"},
                            Harness::worker_env(address, n, id)));
  }
  ASSERT_TRUE(h.wait_exits(procs, milliseconds(15000))) << h.dump_all();
  const long step = sync_step(h.out(procs[0]));
  EXPECT_GT(step, 0) << h.dump_all();
  for (int p : procs) {
    EXPECT_EQ(h.exit_code(p), 0) << h.dump(p);
    EXPECT_EQ(sync_step(h.out(p)), step) << h.dump(p);
    EXPECT_THAT(h.err(p), HasSubstr("(process 1 was told by its scheduler)")) << h.dump(p);
  }
}

// mcx-run forwards its SIGTERM to every worker; they stop together and exit 0, and so does mcx-run (a clean
// shutdown: a scheduler must not read a saved preemption as a failure).
TEST(PreemptionUnderMcxRun, SigtermToTheLauncherReachesEveryWorker) {
  const int n = 3;
  Harness h;
  const int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", std::to_string(n), "--grace-period", "10", "--",
                                    preemption_worker_path(), "job", "5"});
  for (int id = 0; id < n; ++id) {
    ASSERT_TRUE(h.wait_output(r, "[p" + std::to_string(id) + "] READY", milliseconds(10000))) << h.dump(r);
  }
  h.run_until([] { return false; }, milliseconds(200));
  ASSERT_EQ(::kill(h.proc(r).sub->pid(), SIGTERM), 0);
  ASSERT_TRUE(h.wait_exit(r, milliseconds(15000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("every process exited 0 after Terminated: a clean shutdown")) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("forwarding it to every process")) << h.dump(r);
  EXPECT_THAT(h.err(r), ::testing::Not(HasSubstr("sent SIGKILL"))) << h.dump(r);
  const long step = sync_step(h.out(r), "[p0] ");
  EXPECT_GT(step, 0) << h.dump(r);
  for (int id = 1; id < n; ++id) {
    EXPECT_EQ(sync_step(h.out(r), "[p" + std::to_string(id) + "] "), step) << h.dump(r);
  }
}

// No initialize: SIGTERM makes the next call return true.
TEST(PreemptionSingleProcess, SigtermStopsAtTheNextStep) {
  Harness h;
  const int p = h.spawn("single", {preemption_worker_path(), "single", "5"});
  ASSERT_TRUE(h.wait_output(p, "READY", milliseconds(10000))) << h.dump(p);
  h.run_until([] { return false; }, milliseconds(100));
  ASSERT_EQ(::kill(h.proc(p).sub->pid(), SIGTERM), 0);
  ASSERT_TRUE(h.wait_exit(p, milliseconds(5000))) << h.dump(p);
  EXPECT_EQ(h.exit_code(p), 0) << h.dump(p);
  EXPECT_GT(sync_step(h.out(p)), 0) << h.dump(p);
}

}  // namespace
}  // namespace mcx::mptest
