// mcx-ctl against a live job, and the hello_distributed example under mcx-run and under OpenMPI's mpirun.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"
#include "tools/common/subprocess.h"

namespace mcx::mptest {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// Runs mcx-ctl to completion; returns its index.
int ctl(Harness& h, const std::string& addr, std::vector<std::string> args) {
  std::vector<std::string> argv = {tool_path("mcx-ctl"), "--coordinator", addr};
  argv.insert(argv.end(), args.begin(), args.end());
  int i = h.spawn("mcx-ctl", argv);
  EXPECT_TRUE(h.wait_exit(i, milliseconds(10000))) << h.dump(i);
  return i;
}

TEST(McxCtl, StatusShowsTasksHeartbeatsAndWhoIsMissingFromABarrier) {
  Harness h;
  std::string addr = h.start_coordinator(2);
  ASSERT_FALSE(addr.empty());
  int t0 = h.spawn("task0", {worker_path(), "barrier", "phase/1", "20"}, Harness::worker_env(addr, 2, 0));
  int t1 = h.spawn("task1", {worker_path(), "wait", "20"}, Harness::worker_env(addr, 2, 1));
  ASSERT_TRUE(h.wait_output(t0, "READY", milliseconds(15000))) << h.dump_all();
  ASSERT_TRUE(h.wait_output(t1, "READY", milliseconds(15000))) << h.dump_all();

  // Task 0 enters the barrier right after READY; poll until the coordinator shows it.
  json status;
  bool seen = h.run_until(
      [&] {
        int c = ctl(h, addr, {"--json", "status"});
        if (h.exit_code(c) != 0) return false;
        status = json::parse(h.out(c), nullptr, false);
        return !status.is_discarded() && !status["barriers"].empty();
      },
      milliseconds(10000));
  ASSERT_TRUE(seen) << status.dump(2) << h.dump_all();
  EXPECT_EQ(status["num_tasks"], 2);
  EXPECT_EQ(status["recoverable"], false);
  ASSERT_EQ(status["tasks"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& t = status["tasks"][i];
    EXPECT_EQ(t["id"], i);
    EXPECT_EQ(t["state"], "CONNECTED");
    EXPECT_NE(t["incarnation"], "0000000000000000");
    ASSERT_TRUE(t["last_heartbeat_age_s"].is_number()) << t.dump();
    EXPECT_LT(t["last_heartbeat_age_s"].get<double>(), 3.0);
  }
  // The two tasks have different incarnations.
  EXPECT_NE(status["tasks"][0]["incarnation"], status["tasks"][1]["incarnation"]);
  const json& b = status["barriers"][0];
  EXPECT_EQ(b["name"], "phase/1");
  EXPECT_EQ(b["arrived"], json::array({0}));
  EXPECT_EQ(b["missing"], json::array({1}));
  EXPECT_DOUBLE_EQ(b["timeout_s"].get<double>(), 20.0);

  int text = ctl(h, addr, {"status"});
  EXPECT_EQ(h.exit_code(text), 0);
  EXPECT_THAT(h.out(text), HasSubstr("tasks 2/2 connected"));
  EXPECT_THAT(h.out(text), HasSubstr("CONNECTED"));
  EXPECT_THAT(h.out(text), HasSubstr("phase/1"));
  int bars = ctl(h, addr, {"barriers"});
  EXPECT_THAT(h.out(bars), ::testing::MatchesRegex("(.|\n)*phase/1 +0 +1/2 .*\\[1\\](.|\n)*"));

  // The key-value store through mcx-ctl: set, get, ls, incr, rm; the observer did not join the job.
  EXPECT_EQ(h.exit_code(ctl(h, addr, {"kv", "set", "ops/a", "alpha"})), 0);
  EXPECT_EQ(h.exit_code(ctl(h, addr, {"kv", "set", "ops/b", "beta"})), 0);
  int get = ctl(h, addr, {"kv", "get", "ops/a"});
  EXPECT_EQ(h.out(get), "alpha\n");
  int ls = ctl(h, addr, {"kv", "ls", "ops"});
  EXPECT_EQ(h.out(ls), "ops/a\talpha\nops/b\tbeta\n");
  EXPECT_EQ(h.exit_code(ctl(h, addr, {"kv", "set", "ops/nl", "two\nlines"})), 0);
  int ls_nl = ctl(h, addr, {"kv", "ls", "ops"});
  EXPECT_THAT(h.out(ls_nl), HasSubstr("ops/nl\ttwo\\nlines\n"));  // escaped: one line per entry
  int no = ctl(h, addr, {"kv", "set", "--no-overwrite", "ops/a", "x"});
  EXPECT_EQ(h.exit_code(no), 1);
  EXPECT_THAT(h.err(no), HasSubstr("ALREADY_EXISTS"));
  int inc = ctl(h, addr, {"kv", "incr", "ops/n", "5"});
  EXPECT_EQ(h.out(inc), "5\n");
  int rm = ctl(h, addr, {"kv", "rm", "ops"});
  EXPECT_THAT(h.out(rm), HasSubstr("deleted 4"));
  int missing = ctl(h, addr, {"kv", "get", "ops/a"});
  EXPECT_EQ(h.exit_code(missing), 1);
  EXPECT_THAT(h.err(missing), HasSubstr("NOT_FOUND"));
  // The topology the tasks published is visible too.
  int topo = ctl(h, addr, {"kv", "ls", "mcx/task"});
  EXPECT_THAT(h.out(topo), HasSubstr("mcx/task/0/topology"));
  EXPECT_THAT(h.out(topo), HasSubstr("mcx/task/1/topology"));
}

TEST(McxCoordinator, ExitsCleanlyOnSigtermAndWhenTheJobIsDone) {
  Harness h;
  std::string addr = h.start_coordinator(1);
  ASSERT_FALSE(addr.empty());
  ::kill(h.proc(h.coordinator_index()).sub->pid(), SIGTERM);
  ASSERT_TRUE(h.wait_exit(h.coordinator_index(), milliseconds(5000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(h.coordinator_index()), 0) << h.dump_all();

  // --exit-when-done: exits 0 once every task has shut down.
  Harness h2;
  std::string addr2 = h2.start_coordinator(2, {"--exit-when-done"});
  ASSERT_FALSE(addr2.empty());
  int a = h2.spawn("task0", {worker_path(), "hello"}, Harness::worker_env(addr2, 2, 0));
  int b = h2.spawn("task1", {worker_path(), "hello"}, Harness::worker_env(addr2, 2, 1));
  ASSERT_TRUE(h2.wait_exits({a, b, h2.coordinator_index()}, milliseconds(15000))) << h2.dump_all();
  EXPECT_EQ(h2.exit_code(a), 0);
  EXPECT_EQ(h2.exit_code(b), 0);
  EXPECT_EQ(h2.exit_code(h2.coordinator_index()), 0) << h2.dump_all();
  EXPECT_THAT(h2.err(h2.coordinator_index()), HasSubstr("task 1 SHUTDOWN"));
}

// Two coordinators on one port would split the job's connections between them (gRPC sets SO_REUSEPORT
// unless GRPC_ARG_ALLOW_REUSEPORT is 0): the second must refuse to start.
TEST(McxCoordinator, RefusesAnAddressInUse) {
  Harness h;
  std::string addr = h.start_coordinator(1);
  ASSERT_FALSE(addr.empty());
  int second = h.spawn("second", {tool_path("mcx-coordinator"), "--bind", addr, "-n", "1"});
  ASSERT_TRUE(h.wait_exit(second, milliseconds(5000))) << h.dump(second);
  EXPECT_EQ(h.exit_code(second), 2) << h.dump(second);
  EXPECT_THAT(h.err(second), HasSubstr(addr));
}

TEST(McxCtl, UnreachableCoordinatorExitsWith3) {
  Harness h;
  auto start = Clock::now();
  int c = ctl(h, "127.0.0.1:9", {"--timeout", "1", "status"});
  EXPECT_EQ(h.exit_code(c), 3) << h.dump(c);
  EXPECT_LT(seconds_between(start, h.proc(c).exited), 5.0);
}

TEST(Example, HelloDistributedUnderMcxRun) {
  if (hello_path().empty()) GTEST_SKIP() << "examples are not built (MCX_BUILD_EXAMPLES=OFF)";
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "4", "--cpu-devices", "2", "--", hello_path()});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(20000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  for (int i = 0; i < 4; ++i) {
    std::string p = "[p" + std::to_string(i) + "] process " + std::to_string(i);
    EXPECT_THAT(h.out(r), HasSubstr(p + " of 4: 8 global devices, 2 local devices"));
    int right = (i + 1) % 4;
    EXPECT_THAT(h.out(r), HasSubstr(p + " read from process " + std::to_string(right) + ": hello from process " +
                                    std::to_string(right) + " (" + std::to_string(right * right + 7) + ")"));
    EXPECT_THAT(h.out(r), HasSubstr(p + " passed the barrier"));
  }
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(Example, HelloDistributedUnderMpirun) {
  if (hello_path().empty()) GTEST_SKIP() << "examples are not built (MCX_BUILD_EXAMPLES=OFF)";
  std::string mpirun = tools::find_tool("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun (Debian openmpi-bin) is not installed";
  Harness h;
  std::string addr = "127.0.0.1:" + std::to_string(free_port());
  // Process id and count come from OpenMPI's OMPI_COMM_WORLD_* variables; process 0 hosts the service.
  int r = h.spawn("mpirun", {mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "2", "-x",
                             "MCX_COORDINATOR_ADDRESS=" + addr, "-x", "MCX_INIT_TIMEOUT=15", hello_path()},
                  {{"OMPI_MCA_plm_rsh_agent", ""}, {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"}});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(25000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  EXPECT_THAT(h.out(r), HasSubstr("process 0 of 2: 2 global devices, 1 local devices"));
  EXPECT_THAT(h.out(r), HasSubstr("process 1 of 2: 2 global devices, 1 local devices"));
  EXPECT_THAT(h.out(r), HasSubstr("process 1 read from process 0: hello from process 0 (7)"));
  EXPECT_THAT(h.out(r), HasSubstr("process 0 passed the barrier"));
  EXPECT_THAT(h.out(r), HasSubstr("process 1 passed the barrier"));
}

}  // namespace
}  // namespace mcx::mptest
