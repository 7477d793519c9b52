// Bad input and faults with real processes over real gRPC on loopback: wrong/duplicate ids, a mismatched
// process count, an unreachable coordinator, a stale incarnation, oversized KV entries, kill -9 of a task
// and of the coordinator, a stuck task, mcx-run restarting a failed task in recoverable mode, and a client
// flooding the coordinator.
#include <signal.h>

#include <atomic>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kFailureExit = 43;  // mcx::distributed::kFailureExitCode

int spawn_worker(Harness& h, const std::string& addr, int n, int id, std::vector<std::string> args,
                 const Env& extra = {}) {
  std::vector<std::string> argv = {worker_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return h.spawn("task" + std::to_string(id), argv, Harness::worker_env(addr, n, id, extra));
}

TEST(Faults, AJobOfThreeRunsToCompletion) {
  Harness h;
  std::string addr = h.start_coordinator(3);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w;
  for (int i = 0; i < 3; ++i) w.push_back(spawn_worker(h, addr, 3, i, {"hello"}));
  ASSERT_TRUE(h.wait_exits(w, milliseconds(15000))) << h.dump_all();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(h.exit_code(w[i]), 0) << h.dump(w[i]);
    EXPECT_THAT(h.out(w[i]), HasSubstr("task " + std::to_string(i) + " of 3 passed the barrier"));
  }
}

TEST(Faults, ProcessIdOutOfRangeIsRefusedBeforeConnecting) {
  Harness h;
  int w = h.spawn("task5", {worker_path(), "init"}, Harness::worker_env("127.0.0.1:9", 2, 5));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(10000))) << h.dump(w);
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(h.out(w), HasSubstr("5"));
}

TEST(Faults, DuplicateProcessIdIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(2);
  ASSERT_FALSE(addr.empty());
  int a = spawn_worker(h, addr, 2, 0, {"wait", "10"});
  ASSERT_TRUE(h.run_until([&] { return h.err(h.coordinator_index()).find("task 0 CONNECTED") != std::string::npos; },
                          milliseconds(10000)))
      << h.dump_all();
  int b = spawn_worker(h, addr, 2, 0, {"init"});  // a second process claiming id 0
  ASSERT_TRUE(h.wait_exit(b, milliseconds(15000))) << h.dump_all();
  EXPECT_NE(h.exit_code(b), 0) << h.dump(b);
  EXPECT_THAT(h.out(b) + h.err(b), HasSubstr("task 0")) << h.dump(b);
  // Fate-sharing: the job cannot continue with two processes claiming one id; the first one is told too.
  ASSERT_TRUE(h.wait_exit(a, milliseconds(15000))) << h.dump_all();
  EXPECT_NE(h.exit_code(a), 0) << h.dump(a);
}

TEST(Faults, MismatchedProcessCountIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(2);
  ASSERT_FALSE(addr.empty());
  int w = spawn_worker(h, addr, 3, 0, {"init"});  // believes the job has 3 processes
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(h.out(w), HasSubstr("3"));
  EXPECT_THAT(h.out(w), HasSubstr("2"));
}

TEST(Faults, UnreachableCoordinatorFailsWithinTheInitTimeout) {
  Harness h;
  auto start = Clock::now();
  // Port 9 (discard) on loopback: nothing listens there.
  int w = h.spawn("task0", {worker_path(), "init"},
                  Harness::worker_env("127.0.0.1:9", 2, 0, {{"MCX_INIT_TIMEOUT", "2"}}));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump(w);
  double took = seconds_between(start, h.proc(w).exited);
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), AnyOf(HasSubstr("UNAVAILABLE"), HasSubstr("DEADLINE_EXCEEDED")));
  EXPECT_THAT(h.out(w), HasSubstr("127.0.0.1:9"));
  EXPECT_GE(took, 1.5) << "gave up before the init timeout";
  EXPECT_LT(took, 2.0 + 3.0) << "not within the init timeout (+ grace)";
}

TEST(Faults, MissingProcessIsNamedWhenRegistrationTimesOut) {
  Harness h;
  std::string addr = h.start_coordinator(3);
  ASSERT_FALSE(addr.empty());
  Env fast = {{"MCX_INIT_TIMEOUT", "2"}};
  int a = spawn_worker(h, addr, 3, 0, {"init"}, fast);
  int b = spawn_worker(h, addr, 3, 1, {"init"}, fast);  // task 2 never starts
  ASSERT_TRUE(h.wait_exits({a, b}, milliseconds(15000))) << h.dump_all();
  for (int w : {a, b}) {
    EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
    EXPECT_THAT(h.out(w), HasSubstr("DEADLINE_EXCEEDED"));
    EXPECT_THAT(h.out(w), HasSubstr("2")) << "the missing task must be named";
  }
}

TEST(Faults, StaleIncarnationIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(1);
  ASSERT_FALSE(addr.empty());
  int w = h.spawn("stale", {worker_path(), "stale"}, Harness::worker_env(addr, 1, 0));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), AnyOf(HasSubstr("FAILED_PRECONDITION"), HasSubstr("ABORTED")));
  EXPECT_THAT(h.out(w), HasSubstr("incarnation"));
}

TEST(Faults, OversizedKeysAndValuesAreRefused) {
  Harness h;
  std::string addr = h.start_coordinator(1);
  ASSERT_FALSE(addr.empty());
  int w = spawn_worker(h, addr, 1, 0, {"kv_limits"});
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 0) << h.dump(w);
  EXPECT_THAT(h.out(w), HasSubstr("KEY INVALID_ARGUMENT"));
  EXPECT_THAT(h.out(w), HasSubstr("2000"));      // the key's size
  EXPECT_THAT(h.out(w), HasSubstr("1024"));      // the limit
  EXPECT_THAT(h.out(w), HasSubstr("VALUE INVALID_ARGUMENT"));
  EXPECT_THAT(h.out(w), HasSubstr("5242880"));   // the value's size
  EXPECT_THAT(h.out(w), HasSubstr("FINE OK"));
}

// kill -9 of one task: the others are told (and, fate-sharing, exit naming it) within a second.
TEST(Faults, KilledTaskIsDetectedWithinOneSecond) {
  Harness h;
  std::string addr = h.start_coordinator(3);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w;
  for (int i = 0; i < 3; ++i) w.push_back(spawn_worker(h, addr, 3, i, {"wait", "30"}));
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "READY", milliseconds(15000))) << h.dump_all();
  auto killed_at = Clock::now();
  h.kill9(w[2]);
  ASSERT_TRUE(h.wait_exits({w[0], w[1]}, milliseconds(10000))) << h.dump_all();
  for (int i : {w[0], w[1]}) {
    double took = seconds_between(killed_at, h.proc(i).exited);
    RecordProperty("detect_s_task" + std::to_string(i), std::to_string(took));
    std::printf("%s exited %.3f s after kill -9 of task 2\n", h.proc(i).name.c_str(), took);
    EXPECT_LT(took, 1.0) << h.dump(i);
    EXPECT_EQ(h.exit_code(i), kFailureExit) << h.dump(i);
    EXPECT_THAT(h.err(i) + h.out(i), HasSubstr("task 2")) << h.dump(i);
  }
}

// kill -9 of the coordinator: every task fails fast with a clear message, nobody hangs.
TEST(Faults, KilledCoordinatorFailsEveryTaskFast) {
  Harness h;
  std::string addr = h.start_coordinator(2);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w;
  for (int i = 0; i < 2; ++i) w.push_back(spawn_worker(h, addr, 2, i, {"wait", "30"}));
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "READY", milliseconds(15000))) << h.dump_all();
  auto killed_at = Clock::now();
  h.kill9(h.coordinator_index());
  ASSERT_TRUE(h.wait_exits(w, milliseconds(15000))) << h.dump_all();
  for (int i : w) {
    double took = seconds_between(killed_at, h.proc(i).exited);
    std::printf("task exited %.3f s after kill -9 of the coordinator\n", took);
    EXPECT_LT(took, 3.0) << h.dump(i);
    EXPECT_EQ(h.exit_code(i), kFailureExit) << h.dump(i);
    EXPECT_THAT(h.err(i) + h.out(i), HasSubstr("coordination service")) << h.dump(i);
  }
}

// A task that stops entirely (SIGSTOP: no heartbeats, but its connection stays open) is failed by the
// heartbeat timeout, and the others are told.
TEST(Faults, StoppedTaskIsDetectedByHeartbeatTimeout) {
  Harness h;
  std::string addr = h.start_coordinator(2, {"--heartbeat-timeout", "2"});
  ASSERT_FALSE(addr.empty());
  Env hb = {{"MCX_HEARTBEAT_INTERVAL", "0.5"}, {"MCX_HEARTBEAT_TIMEOUT", "2"}};
  std::vector<int> w;
  for (int i = 0; i < 2; ++i) w.push_back(spawn_worker(h, addr, 2, i, {"wait", "30"}, hb));
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "READY", milliseconds(15000))) << h.dump_all();
  auto stopped_at = Clock::now();
  ::kill(h.proc(w[1]).sub->pid(), SIGSTOP);
  ASSERT_TRUE(h.wait_exit(w[0], milliseconds(10000))) << h.dump_all();
  double took = seconds_between(stopped_at, h.proc(w[0]).exited);
  std::printf("task 0 exited %.3f s after SIGSTOP of task 1 (heartbeat timeout 2 s)\n", took);
  EXPECT_EQ(h.exit_code(w[0]), kFailureExit) << h.dump(w[0]);
  EXPECT_THAT(h.err(w[0]) + h.out(w[0]), HasSubstr("task 1")) << h.dump(w[0]);
  EXPECT_THAT(h.err(w[0]) + h.out(w[0]), HasSubstr("heartbeat")) << h.dump(w[0]);
  EXPECT_GE(took, 1.0);
  EXPECT_LT(took, 2.0 + 2.0);  // timeout + checker period + exit
  ::kill(h.proc(w[1]).sub->pid(), SIGCONT);
  h.kill9(w[1]);
}

// A task that is alive (heartbeating) but never arrives: the barrier times out and names it.
TEST(Faults, StuckTaskIsNamedByTheBarrierTimeout) {
  Harness h;
  std::string addr = h.start_coordinator(3);
  ASSERT_FALSE(addr.empty());
  std::vector<int> w;
  // The coordinator answers both waiting tasks at once; the first to read its answer exits, which the other may
  // hear before its own answer arrives (fate-sharing would end it with 43). With a failure callback it keeps
  // waiting for the barrier's answer, which is what this test is about.
  for (int i = 0; i < 3; ++i) {
    w.push_back(spawn_worker(h, addr, 3, i, {"stuck", "1", "15"}, {{"MP_WORKER_NOTICE", "1"}}));
  }
  auto start = Clock::now();
  ASSERT_TRUE(h.wait_exits({w[0], w[2]}, milliseconds(15000))) << h.dump_all();
  for (int i : {w[0], w[2]}) {
    EXPECT_EQ(h.exit_code(i), 1) << h.dump(i);
    EXPECT_THAT(h.out(i), HasSubstr("DEADLINE_EXCEEDED"));
    EXPECT_THAT(h.out(i), HasSubstr("stuck"));   // the barrier's name
    EXPECT_THAT(h.out(i), HasSubstr("1"));       // the missing task
    EXPECT_LT(seconds_between(start, h.proc(i).exited), 12.0);
  }
  h.kill9(w[1]);
}

// A process of a recoverable job that dies before it registers (here: on its first start) is started once more
// by mcx-run, since registration waits for every process; before, the others waited out the init timeout.
TEST(Faults, McxRunStartsAgainAProcessThatDiedBeforeJoiningARecoverableJob) {
  Harness h;
  TempDir dir;
  const std::string marker = dir.file("died_once");
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--recoverable", "--init-timeout", "30", "--", "sh", "-c",
                              "if [ $MCX_PROCESS_ID = 2 ] && [ ! -e " + marker + " ]; then touch " + marker +
                                  "; kill -9 $$; fi; exec " + worker_path() + " hello"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(25000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("process 2 failed (killed by signal 9 (Killed)) before it joined the job; starting it "
                                  "again (the job cannot assemble without it)"));
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(h.out(r), HasSubstr("[p" + std::to_string(i) + "] task " + std::to_string(i) + " of 3 passed the barrier"));
  }
}

// mcx-run with real workers: a task that dies once is restarted with a new incarnation and the job
// finishes; without restarts, the failure ends the job with that task's exit code.
TEST(Faults, McxRunRestartsAFailedTaskInRecoverableMode) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--max-restarts", "1", "--init-timeout", "10",
                              "--", worker_path(), "flaky", "1"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(20000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("[p1] task 1 run 0"));
  EXPECT_THAT(h.out(r), HasSubstr("[p1] task 1 run 1"));
  for (int i = 0; i < 3; ++i)
    EXPECT_THAT(h.out(r), HasSubstr("[p" + std::to_string(i) + "] task " + std::to_string(i) + " passed flaky/done"));
  EXPECT_THAT(h.err(r), HasSubstr("restart 1 of 1"));
}

TEST(Faults, McxRunEndsTheJobOnAFatalFailure) {
  Harness h;
  auto start = Clock::now();
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--", worker_path(), "crash", "2", "7"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(20000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 7) << h.dump(r);
  EXPECT_THAT(h.err(r), HasSubstr("process 2 failed (exit code 7)"));
  EXPECT_LT(seconds_between(start, h.proc(r).exited), 12.0);
}

// A client flooding the coordinator with requests (thousands per second over gRPC, from one connection) does
// not delay the job's heartbeats and barriers past their deadlines: four tasks keep passing barriers (5 ms
// apart) with a 5 s timeout under a 5 s heartbeat timeout while the flood runs (the slowest barrier is printed),
// and what the flood sends beyond
// the per-peer limit (--rate-limit 2000) is refused with RESOURCE_EXHAUSTED.
TEST(Faults, AFloodingClientDoesNotDelayTheJobsBarriers) {
  Harness h;
  std::string addr = h.start_coordinator(4, {"--rate-limit", "2000", "--heartbeat-timeout", "5"});
  ASSERT_FALSE(addr.empty());
  std::vector<int> w;
  for (int i = 0; i < 4; ++i) {
    w.push_back(spawn_worker(h, addr, 4, i, {"barriers", "4"},
                             {{"MCX_HEARTBEAT_INTERVAL", "0.5"}, {"MCX_HEARTBEAT_TIMEOUT", "5"}}));
  }
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "READY", milliseconds(15000))) << h.dump_all();
  auto client = distributed::make_grpc_client({addr, {}});
  ASSERT_TRUE(client.ok()) << client.status();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> answered{0}, limited{0}, other{0};
  std::vector<std::thread> flooders;
  const auto flood_start = Clock::now();
  for (int t = 0; t < 6; ++t) {
    flooders.emplace_back([&] {
      while (!stop.load()) {
        absl::Status s = (*client)->kv_try_get("flood/nothing", absl::Seconds(2)).status();
        if (s.code() == absl::StatusCode::kResourceExhausted) {
          limited.fetch_add(1);
        } else if (s.code() == absl::StatusCode::kNotFound) {
          answered.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      }
    });
  }
  const bool exited = h.wait_exits(w, milliseconds(30000));
  stop.store(true);
  for (auto& t : flooders) t.join();
  const double seconds = seconds_between(flood_start, Clock::now());
  const double rate = static_cast<double>(answered + limited + other) / seconds;
  std::printf("flood: %.0f requests/s for %.1f s (%lld answered, %lld refused by the rate limit, %lld other)\n", rate,
              seconds, static_cast<long long>(answered.load()), static_cast<long long>(limited.load()),
              static_cast<long long>(other.load()));
  ASSERT_TRUE(exited) << h.dump_all();
  for (int i : w) {
    EXPECT_EQ(h.exit_code(i), 0) << h.dump(i);
    EXPECT_THAT(h.out(i), HasSubstr("BARRIERS ")) << h.dump(i);
    const std::string& o = h.out(i);
    if (size_t at = o.find("BARRIERS "); at != std::string::npos) {
      std::printf("%s: %s\n", h.proc(i).name.c_str(), o.substr(at, o.find('\n', at) - at).c_str());
    }
  }
  EXPECT_GT(limited.load(), 0) << "the flood was never limited";
  EXPECT_LE(static_cast<double>(answered.load()), 2000.0 * (seconds + 1.5)) << "more answered than the limit allows";
  EXPECT_EQ(other.load(), 0);
  RecordProperty("flood_requests_per_s", std::to_string(rate));
}

}  // namespace
}  // namespace mcx::mptest
