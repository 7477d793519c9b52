// mcx-run on its own: output prefixing, exit codes, ending the others, restarts, signals, deadlines.
// The programs here are shell one-liners against an external (unused) coordinator address, so these
// tests exercise the launcher alone; faults_test.cc runs it with real mcx workers.
#include <signal.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/cpu_affinity.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> run_args(std::vector<std::string> flags, const std::string& script) {
  std::vector<std::string> argv = {tool_path("mcx-run"), "--coordinator", "127.0.0.1:9"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--", "sh", "-c", script});
  return argv;
}

TEST(McxRun, PrefixesEveryLineAndSetsTheEnvironment) {
  Harness h;
  int r = h.spawn("mcx-run", run_args({"-n", "3", "--cpu-devices", "2"},
                                      "echo id=$MCX_PROCESS_ID n=$MCX_NUM_PROCESSES dev=$MCX_CPU_DEVICE_COUNT "
                                      "addr=$MCX_COORDINATOR_ADDRESS; echo second; echo to-stderr >&2; "
                                      "printf no-newline"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  for (int i = 0; i < 3; ++i) {
    std::string p = "[p" + std::to_string(i) + "] ";
    EXPECT_THAT(h.out(r), HasSubstr(p + "id=" + std::to_string(i) + " n=3 dev=2 addr=127.0.0.1:9\n"));
    EXPECT_THAT(h.out(r), HasSubstr(p + "second\n"));
    EXPECT_THAT(h.out(r), HasSubstr(p + "no-newline\n"));  // a partial last line is flushed at exit
    EXPECT_THAT(h.err(r), HasSubstr(p + "to-stderr\n"));
  }
  // Every stdout line carries a prefix (no interleaving inside a line).
  std::istringstream lines(h.out(r));
  for (std::string line; std::getline(lines, line);) EXPECT_THAT(line, ::testing::MatchesRegex("\\[p[0-2]\\] .*"));
}

// --gpus-per-process G gives process i the GPUs i*G .. i*G+G-1 (MCX_LOCAL_DEVICE_IDS), modulo --gpus when the
// host has fewer than N*G (processes then share GPUs); more GPUs per process than the host has is refused.
TEST(McxRun, GivesEachProcessItsGpus) {
  Harness h;
  int r = h.spawn("mcx-run", run_args({"-n", "3", "--gpus-per-process", "2", "--gpus", "4"},
                                      "echo ids=$MCX_LOCAL_DEVICE_IDS"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p0] ids=0,1\n"));
  EXPECT_THAT(h.out(r), HasSubstr("[p1] ids=2,3\n"));
  EXPECT_THAT(h.out(r), HasSubstr("[p2] ids=0,1\n"));  // shares with process 0
  int alone = h.spawn("mcx-run", run_args({"-n", "2", "--gpus-per-process", "1"}, "echo ids=$MCX_LOCAL_DEVICE_IDS"));
  ASSERT_TRUE(h.wait_exit(alone, milliseconds(10000))) << h.dump(alone);
  EXPECT_THAT(h.out(alone), HasSubstr("[p1] ids=1\n"));  // without --gpus: one GPU each
  int bad = h.spawn("mcx-run", run_args({"-n", "2", "--gpus-per-process", "2", "--gpus", "1"}, "true"));
  ASSERT_TRUE(h.wait_exit(bad, milliseconds(10000))) << h.dump(bad);
  EXPECT_EQ(h.exit_code(bad), 2);
  EXPECT_THAT(h.err(bad), HasSubstr("--gpus-per-process 2 is more than the host's --gpus 1"));
}

// The CPUs each process of an mcx-run job may run on, as the kernel reports them to the process.
std::map<int, std::set<int>> cpus_by_process(const std::string& out) {
  std::map<int, std::set<int>> cpus;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, std::regex(R"(\[p(\d+)\] Cpus_allowed_list:\s*(\S+))"))) continue;
    std::set<int>& mine = cpus[std::stoi(m[1])];
    std::istringstream ranges(m[2].str());
    for (std::string range; std::getline(ranges, range, ',');) {
      const size_t dash = range.find('-');
      const int first = std::stoi(range.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
      for (int cpu = first; cpu <= last; ++cpu) mine.insert(cpu);
    }
  }
  return cpus;
}

// --cpu-bind cores gives each process a block of mcx-run's CPUs of its own (together: all of them); more processes
// than CPUs get one CPU each, shared; without it every process inherits mcx-run's CPUs.
TEST(McxRun, CpuBindCoresGivesEachProcessItsOwnCpus) {
  const std::vector<int> all = allowed_cpus();
  const std::set<int> everything(all.begin(), all.end());
  const std::string script = "grep Cpus_allowed_list /proc/self/status";
  Harness h;
  const int n = std::min<int>(2, static_cast<int>(all.size()));
  int bound = h.spawn("mcx-run", run_args({"-n", std::to_string(n), "--cpu-bind", "cores"}, script));
  ASSERT_TRUE(h.wait_exit(bound, milliseconds(10000))) << h.dump(bound);
  ASSERT_EQ(h.exit_code(bound), 0) << h.dump(bound);
  std::map<int, std::set<int>> cpus = cpus_by_process(h.out(bound));
  ASSERT_EQ(static_cast<int>(cpus.size()), n) << h.dump(bound);
  std::set<int> together;
  for (const auto& [process, mine] : cpus) {
    EXPECT_FALSE(mine.empty()) << "process " << process;
    for (int cpu : mine) EXPECT_TRUE(together.insert(cpu).second) << "CPU " << cpu << " given twice";
  }
  EXPECT_EQ(together, everything);

  // Oversubscribed: mcx-run itself on one CPU, three processes, all on it.
  const std::string first = std::to_string(all.front());
  std::vector<std::string> argv = run_args({"-n", "3", "--cpu-bind", "cores"}, script);
  argv.insert(argv.begin(), {"taskset", "-c", first});
  int shared = h.spawn("mcx-run", argv);
  ASSERT_TRUE(h.wait_exit(shared, milliseconds(10000))) << h.dump(shared);
  ASSERT_EQ(h.exit_code(shared), 0) << h.dump(shared);
  EXPECT_THAT(h.err(shared), HasSubstr("--cpu-bind cores: 3 processes on 1 CPUs; processes share CPUs"));
  cpus = cpus_by_process(h.out(shared));
  ASSERT_EQ(cpus.size(), 3u) << h.dump(shared);
  for (const auto& [process, mine] : cpus) EXPECT_EQ(mine, std::set<int>{all.front()}) << "process " << process;

  int unbound = h.spawn("mcx-run", run_args({"-n", "2"}, script));
  ASSERT_TRUE(h.wait_exit(unbound, milliseconds(10000))) << h.dump(unbound);
  for (const auto& [process, mine] : cpus_by_process(h.out(unbound))) EXPECT_EQ(mine, everything) << process;

  int bad = h.spawn("mcx-run", run_args({"-n", "2", "--cpu-bind", "sockets"}, "true"));
  ASSERT_TRUE(h.wait_exit(bad, milliseconds(10000))) << h.dump(bad);
  EXPECT_NE(h.exit_code(bad), 0);
  EXPECT_THAT(h.err(bad), HasSubstr("--cpu-bind"));
}

TEST(McxRun, ReturnsTheFirstFailuresExitCodeAndEndsTheOthers) {
  Harness h;
  // p1 fails with 5 at once; p0 and p2 would run for 60 s.
  auto start = Clock::now();
  int r = h.spawn("mcx-run", run_args({"-n", "3", "--grace-period", "1"},
                                      "if [ $MCX_PROCESS_ID = 1 ]; then exit 5; fi; exec sleep 60"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 5) << h.dump(r);
  EXPECT_LT(seconds_between(start, h.proc(r).exited), 3.0);
  EXPECT_THAT(h.err(r), HasSubstr("process 1 failed (exit code 5)"));
}

TEST(McxRun, KillsAProcessThatIgnoresSigtermAfterTheGracePeriod) {
  Harness h;
  TempDir dir;
  auto start = Clock::now();
  // p1 ignores SIGTERM and says so through a marker file; p0 fails once p1 is armed.
  int r = h.spawn("mcx-run", run_args({"-n", "2", "--grace-period", "1"},
                                      "M=" + dir.file("armed") +
                                          "; if [ $MCX_PROCESS_ID = 0 ]; then while [ ! -e $M ]; do sleep 0.01; done; "
                                          "exit 3; fi; trap '' TERM; touch $M; sleep 60"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  double took = seconds_between(start, h.proc(r).exited);
  EXPECT_EQ(h.exit_code(r), 3) << h.dump(r);
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 4.0);
  EXPECT_THAT(h.err(r), HasSubstr("sent SIGKILL"));
}

TEST(McxRun, ReportsASignalDeathAs128PlusTheSignal) {
  Harness h;
  int r = h.spawn("mcx-run", run_args({"-n", "2"}, "if [ $MCX_PROCESS_ID = 1 ]; then kill -9 $$; fi; sleep 60"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 128 + SIGKILL) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("process 1 failed (killed by signal 9"));
}

TEST(McxRun, RestartsAFailedProcessUpToMaxRestarts) {
  Harness h;
  // p1 fails on its first two runs and succeeds on the third.
  int r = h.spawn("mcx-run", run_args({"-n", "2", "--max-restarts", "2"},
                                      "echo run=$MCX_RESTART_COUNT; "
                                      "if [ $MCX_PROCESS_ID = 1 ] && [ $MCX_RESTART_COUNT -lt 2 ]; then exit 4; fi"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p1] run=0"));
  EXPECT_THAT(h.out(r), HasSubstr("[p1] run=1"));
  EXPECT_THAT(h.out(r), HasSubstr("[p1] run=2"));
  EXPECT_THAT(h.out(r), Not(HasSubstr("[p0] run=1")));
  EXPECT_THAT(h.err(r), HasSubstr("restart 2 of 2"));

  // With one restart allowed, the second failure is fatal.
  int r2 = h.spawn("mcx-run", run_args({"-n", "2", "--max-restarts", "1"},
                                       "if [ $MCX_PROCESS_ID = 1 ]; then exit 4; fi; exec sleep 60"));
  ASSERT_TRUE(h.wait_exit(r2, milliseconds(15000))) << h.dump(r2);
  EXPECT_EQ(h.exit_code(r2), 4) << h.dump(r2);
  EXPECT_THAT(h.err(r2), HasSubstr("has no restarts left"));
}

TEST(McxRun, RecoverableJobCarriesOnWithoutAFailedProcess) {
  Harness h;
  // p1 fails; the others keep running and succeed: the job succeeds, naming the process it lost.
  int r = h.spawn("mcx-run", run_args({"-n", "3", "--recoverable"},
                                      "if [ $MCX_PROCESS_ID = 1 ]; then exit 4; fi; "
                                      "sleep 0.5; echo recoverable=$MCX_RECOVERABLE"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p0] recoverable=1"));
  EXPECT_THAT(h.out(r), HasSubstr("[p2] recoverable=1"));
  EXPECT_THAT(h.err(r), HasSubstr("process 1 failed (exit code 4); the others carry on without it"));
  EXPECT_THAT(h.err(r), HasSubstr("the job finished without processes {1}"));

  // Every process failing is the job failing, with the first one's exit code.
  int r2 = h.spawn("mcx-run", run_args({"-n", "2", "--recoverable"}, "exit 5"));
  ASSERT_TRUE(h.wait_exit(r2, milliseconds(10000))) << h.dump(r2);
  EXPECT_EQ(h.exit_code(r2), 5) << h.dump(r2);
  EXPECT_THAT(h.err(r2), HasSubstr("every process failed"));
}

// The survivors of a kill -9 agree on the smaller live set and compute on it, under the launcher.
TEST(McxRun, RecoverableJobSurvivesAKilledProcess) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--cpu-devices", "1", "--recoverable", "--timeout", "60",
                              "--", live_devices_worker_path(), "1"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(30000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p0] LIVE 2 generation=2 processes=0,2 devices=2 sum=4"));
  EXPECT_THAT(h.out(r), HasSubstr("[p2] LIVE 2 generation=2 processes=0,2 devices=2 sum=4"));
  EXPECT_THAT(h.err(r), HasSubstr("process 1 failed (killed by signal 9"));
}

TEST(McxRun, ForwardsSigintAndExitsWith130) {
  Harness h;
  int r = h.spawn("mcx-run", run_args({"-n", "2"}, "trap 'echo got-int; exit 9' INT; echo up; "
                                                   "while true; do sleep 0.05; done"));
  ASSERT_TRUE(h.run_until([&] { return h.out(r).find("[p1] up") != std::string::npos &&
                                       h.out(r).find("[p0] up") != std::string::npos; },
                          milliseconds(10000)))
      << h.dump(r);
  ::kill(h.proc(r).sub->pid(), SIGINT);
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 130) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p0] got-int"));
  EXPECT_THAT(h.out(r), HasSubstr("[p1] got-int"));
}

TEST(McxRun, JobTimeoutEndsAHungJob) {
  Harness h;
  auto start = Clock::now();
  int r = h.spawn("mcx-run", run_args({"-n", "2", "--timeout", "1", "--grace-period", "1"}, "exec sleep 60"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 124) << h.dump(r);
  EXPECT_LT(seconds_between(start, h.proc(r).exited), 4.0);
}

// A process that keeps failing and being restarted (most of the time it is waiting for its restart) must
// not keep the launcher alive past --timeout.
TEST(McxRun, JobTimeoutEndsAJobThatKeepsRestarting) {
  Harness h;
  auto start = Clock::now();
  int r = h.spawn("mcx-run", run_args({"-n", "2", "--max-restarts", "1000", "--timeout", "1", "--grace-period", "1"},
                                      "sleep 0.02; exit 1"));
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 124) << h.dump(r);
  EXPECT_LT(seconds_between(start, h.proc(r).exited), 4.0);
}

TEST(McxRun, UnknownProgramFailsWith127) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "--coordinator", "127.0.0.1:9", "-n", "2", "--",
                              "/nonexistent/program"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(10000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 127) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("cannot execute '/nonexistent/program'"));
}

}  // namespace
}  // namespace mcx::mptest
