// The coordinator's port on loopback (GrpcCoordinationServer: gRPC and the fast path on one port), with agents
// over each transport (the gRPC client; the fast-path client): KV, barriers, status, failure detection through
// a killed process's broken stream (a child process killed with SIGKILL), coordinator loss, an unreachable
// coordinator, a coordinator that starts late.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/rpc/fast_path_client.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "mcx/distributed/rpc/grpc_server.h"
#include "tests/distributed/callback_result.h"

extern char** environ;

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

struct FailureLog {
  Mutex mu;
  std::vector<TaskFailure> seen;
  absl::Time first_at;
  std::function<void(const TaskFailure&)> callback() {
    return [this](const TaskFailure& f) {
      MutexLock l(&mu);
      if (seen.empty()) first_at = absl::Now();
      seen.push_back(f);
    };
  }
  bool wait(absl::Duration timeout) {
    MutexLock l(&mu);
    auto has = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !seen.empty(); };
    return mu.await_for(has, timeout);
  }
};

// The transport under test: false = gRPC, true = the fast path.
std::unique_ptr<CoordinationClient> make_client(bool fast_path, const std::string& addr) {
  auto client = fast_path ? make_fast_path_client(addr) : make_grpc_client({addr, {}});
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

std::unique_ptr<CoordinationAgent> grpc_agent(bool fast_path, const std::string& addr, TaskId id, int n,
                                              FailureLog* log, absl::Duration init_timeout = absl::Seconds(5)) {
  absl::StatusOr<std::unique_ptr<CoordinationClient>> client = make_client(fast_path, addr);
  EXPECT_TRUE(client.ok()) << client.status();
  AgentOptions ao;
  ao.task_id = id;
  ao.num_tasks = n;
  ao.init_timeout = init_timeout;
  ao.heartbeat_interval = absl::Milliseconds(200);
  ao.heartbeat_timeout = absl::Seconds(3);
  ao.shutdown_timeout = absl::Seconds(3);
  if (log) ao.on_failure = log->callback();
  return std::make_unique<CoordinationAgent>(std::move(*client), ao);
}

struct Cluster {
  std::unique_ptr<CoordinationService> service;
  std::unique_ptr<GrpcCoordinationServer> server;
  std::string addr;
  explicit Cluster(int n, bool recoverable = false) {
    ServiceOptions o;
    o.num_tasks = n;
    o.recoverable = recoverable;
    o.heartbeat_timeout = absl::Seconds(3);
    o.shutdown_timeout = absl::Seconds(3);
    service = *CoordinationService::create(o);
    auto s = GrpcCoordinationServer::start(service.get(), {"127.0.0.1:0", {}});
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    addr = absl::StrCat("127.0.0.1:", server->port());
  }
  // Registers tasks 0..n-1 with incarnations 100 + i directly with the service (tests of what the clients see).
  void register_all(int n) {
    std::vector<Result<absl::StatusOr<RegisterResult>>> registered(n);
    for (int i = 0; i < n; ++i) service->register_task(i, 100 + i, n, absl::Seconds(5), registered[i].cb());
    for (auto& r : registered) ASSERT_TRUE(r.get().ok());
  }
};

class Grpc : public ::testing::TestWithParam<bool> {};

TEST_P(Grpc, AgentsKvBarrierLiveTasksStatusShutdown) {
  Cluster c(3);
  FailureLog logs[3];
  std::vector<std::unique_ptr<CoordinationAgent>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(grpc_agent(GetParam(), c.addr, i, 3, &logs[i]));
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents[i]->connect().ok()); });
  for (auto& t : ts) t.join();
  // KV with bytes, blocking get woken by a later insert.
  std::string blob("a\0b\xff", 4);
  std::thread getter([&] { EXPECT_EQ(*agents[1]->kv_get("late", absl::Seconds(3)), blob); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(agents[0]->kv_insert("late", blob).ok());
  getter.join();
  EXPECT_EQ(agents[2]->kv_insert("late", "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(agents[2]->kv_try_get("none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*agents[2]->kv_increment("ctr", 4), 4);
  auto dir = agents[1]->kv_dir("");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->size(), 4u);  // late, ctr, and the job secret and service mode the service writes (job_secret.h)
  absl::Status big = agents[0]->kv_insert("big", std::string(5 << 20, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("exceeds the limit"));
  // Barrier (reused) and a timeout with the missing task named, through gRPC.
  for (int round = 0; round < 2; ++round) {
    ts.clear();
    for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents[i]->barrier("r", absl::Seconds(3)).ok()); });
    for (auto& t : ts) t.join();
  }
  absl::Status timed = agents[0]->barrier("lonely", absl::Milliseconds(200), {0, 2});
  EXPECT_EQ(timed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(timed.message(), HasSubstr("missing: task 2"));
  // Operator status through an observer client that is not a task.
  auto observer = make_client(GetParam(), c.addr);
  std::thread waiter([&] { (void)agents[1]->barrier("pending", absl::Seconds(2)); });
  absl::SleepFor(absl::Milliseconds(100));
  auto st = observer->status(absl::Seconds(2));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->num_tasks, 3);
  EXPECT_EQ(st->tasks[2].info.incarnation, agents[2]->incarnation());
  EXPECT_TRUE(st->tasks[2].watching);
  ASSERT_EQ(st->barriers.size(), 1u);
  EXPECT_EQ(st->barriers[0].name, "pending");
  EXPECT_EQ(st->barriers[0].missing, std::vector<TaskId>({0, 2}));
  EXPECT_TRUE(observer->cancel_barrier("pending", 0, absl::Seconds(1)).ok());
  waiter.join();
  ts.clear();
  for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents[i]->shutdown().ok()); });
  for (auto& t : ts) t.join();
  for (auto& l : logs) EXPECT_TRUE(l.seen.empty());
}

TEST_P(Grpc, AWatchStreamFollowsEveryChangeThroughDeltas) {
  // An observer's stream (the whole state first, then the tasks changed since each message) must hold the
  // service's state after every kind of change: failures, restarts with new incarnations, many changes at once.
  const int n = 12;
  Cluster c(n, /*recoverable=*/true);
  c.register_all(n);
  auto observer = make_client(GetParam(), c.addr);
  auto stream = observer->watch(-1, 0, absl::Seconds(2));
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto caught_up = [&]() -> JobState {
    const JobState want = c.service->job_state();
    JobState held;
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (held.version < want.version && absl::Now() < until) {
      absl::StatusOr<JobState> s = (*stream)->next(absl::Seconds(1));
      if (s.ok()) held = *s;
    }
    EXPECT_EQ(held.version, want.version);
    EXPECT_EQ(held.tasks, want.tasks);
    return held;
  };
  caught_up();
  for (int round = 0; round < 4; ++round) {
    const TaskId id = 1 + round * 3;
    c.service->fail_task(id, absl::UnavailableError(absl::StrCat("killed in round ", round)));
    if (round % 2 == 1) caught_up();  // sometimes the stream lags two changes behind
    Result<absl::StatusOr<RegisterResult>> again;  // the task restarts with a new incarnation
    c.service->register_task(id, 1000 + round, n, absl::Seconds(5), again.cb());
    ASSERT_TRUE(again.get().ok());
    const JobState held = caught_up();
    EXPECT_EQ(held.tasks[id].incarnation, 1000u + round);
    EXPECT_EQ(held.tasks[id].state, TaskState::kConnected);
  }
  {
    CoordinationService::DeliveryBatch batch(c.service.get());
    for (TaskId id : {0, 5, 11}) c.service->fail_task(id, absl::UnavailableError("killed together"));
  }
  const JobState held = caught_up();
  for (TaskId id : {0, 5, 11}) EXPECT_EQ(held.tasks[id].state, TaskState::kError);
}

TEST_P(Grpc, LiveSetAgreementsAfterTheFirstTravelAsDifferences) {
  // Each client remembers the last agreement it got and the service answers it with what changed: the members
  // must still be exactly right after a failure, a restart (same id, new incarnation) and an unchanged round.
  const int n = 4;
  Cluster c(n, /*recoverable=*/true);
  c.register_all(n);
  std::vector<std::unique_ptr<CoordinationClient>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(make_client(GetParam(), c.addr));
  std::vector<Incarnation> incarnation = {100, 101, 102, 103};
  auto agree = [&](const std::vector<TaskId>& live) {
    std::vector<absl::StatusOr<LiveTasks>> got(n, absl::UnknownError("not called"));
    std::vector<std::thread> ts;
    for (TaskId t : live) {
      ts.emplace_back([&, t] { got[t] = clients[t]->get_live_tasks(t, incarnation[t], LiveSetRequest{}, absl::Seconds(5)); });
    }
    for (auto& t : ts) t.join();
    for (TaskId t : live) {
      ASSERT_TRUE(got[t].ok()) << got[t].status();
      EXPECT_EQ(got[t]->tasks, live);
      std::vector<Incarnation> want;
      for (TaskId m : live) want.push_back(incarnation[m]);
      EXPECT_EQ(got[t]->incarnations, want);
      EXPECT_EQ(got[t]->payloads, std::vector<std::string>(live.size()));
      EXPECT_EQ(got[t]->generation, got[live[0]]->generation);
    }
  };
  agree({0, 1, 2, 3});  // whole answers
  c.service->fail_task(3, absl::UnavailableError("killed"));
  agree({0, 1, 2});     // 3 removed
  agree({0, 1, 2});     // unchanged
  Result<absl::StatusOr<RegisterResult>> again;
  c.service->register_task(3, 900, n, absl::Seconds(5), again.cb());
  ASSERT_TRUE(again.get().ok());
  incarnation[3] = 900;
  agree({0, 1, 2, 3});  // 3 added back with its new incarnation (client 3 held the agreement with 103)
}

TEST_P(Grpc, UnreachableCoordinatorFailsWithinInitTimeout) {
  // A port with nothing listening: bind a server, note its port, stop it.
  int port;
  {
    Cluster c(1);
    port = c.server->port();
  }
  auto agent = grpc_agent(GetParam(), absl::StrCat("127.0.0.1:", port), 0, 1, nullptr, absl::Milliseconds(700));
  absl::Time start = absl::Now();
  absl::Status s = agent->connect();
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("cannot reach the coordination service at 127.0.0.1:"));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_P(Grpc, JoinsQuicklyWhenTheCoordinatorStartsLate) {
  int port;
  {
    Cluster c(1);
    port = c.server->port();
  }
  std::string addr = absl::StrCat("127.0.0.1:", port);
  auto agent = grpc_agent(GetParam(), addr, 0, 1, nullptr, absl::Seconds(10));
  ServiceOptions o;
  o.num_tasks = 1;
  auto service = *CoordinationService::create(o);
  std::unique_ptr<GrpcCoordinationServer> server;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(300));
    server = *GrpcCoordinationServer::start(service.get(), {addr, {}});
  });
  absl::Time start = absl::Now();
  absl::Status s = agent->connect();
  absl::Duration took = absl::Now() - start;
  late.join();
  ASSERT_TRUE(s.ok()) << s;
  // gRPC's default re-resolution rate limit made this take seconds; the client lowers it.
  EXPECT_LT(took, absl::Milliseconds(1800));
  agent.reset();
}

TEST_P(Grpc, RegisterErrorsOverTheWire) {
  Cluster c(2);
  auto client = make_client(GetParam(), c.addr);
  auto r = client->register_task(0, 1, 3, absl::Seconds(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("says the job has 3 processes but the coordination service was "
                                              "started for 2"));
  EXPECT_EQ(client->register_task(7, 1, 2, absl::Seconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(Grpc, CoordinatorLossIsReportedFast) {
  Cluster c(2);
  FailureLog logs[2];
  auto a0 = grpc_agent(GetParam(), c.addr, 0, 2, &logs[0]);
  auto a1 = grpc_agent(GetParam(), c.addr, 1, 2, &logs[1]);
  std::thread t([&] { ASSERT_TRUE(a1->connect().ok()); });
  ASSERT_TRUE(a0->connect().ok());
  t.join();
  absl::Time start = absl::Now();
  c.server->shutdown(absl::Milliseconds(50));
  for (auto& l : logs) {
    ASSERT_TRUE(l.wait(absl::Seconds(2)));
    MutexLock lock(&l.mu);
    EXPECT_LT(l.first_at - start, absl::Seconds(1));
    EXPECT_EQ(l.seen[0].task, -1);
    EXPECT_THAT(l.seen[0].message, HasSubstr("lost the coordination service at 127.0.0.1:"));
  }
}

// Child side of KilledProcessIsDetectedWithinASecond: runs only when spawned by it.
TEST(GrpcChild, DISABLED_RunAsTask) {
  const char* addr = std::getenv("MCX_TEST_CHILD_ADDR");
  const char* task = std::getenv("MCX_TEST_CHILD_TASK");
  if (addr == nullptr || task == nullptr) GTEST_SKIP();
  int id = std::atoi(task);
  const char* fast = std::getenv("MCX_TEST_CHILD_FAST_PATH");
  auto agent = grpc_agent(fast != nullptr && std::string(fast) == "1", addr, id, 2, nullptr);
  ASSERT_TRUE(agent->connect().ok());
  absl::SleepFor(absl::Seconds(30));  // killed long before this
}

TEST_P(Grpc, KilledProcessIsDetectedWithinASecond) {
  Cluster c(2);
  FailureLog log;
  auto a0 = grpc_agent(GetParam(), c.addr, 0, 2, &log);
  std::string env_addr = absl::StrCat("MCX_TEST_CHILD_ADDR=", c.addr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.push_back(env_addr);
  env_s.push_back("MCX_TEST_CHILD_TASK=1");
  env_s.push_back(absl::StrCat("MCX_TEST_CHILD_FAST_PATH=", GetParam() ? 1 : 0));
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=GrpcChild.DISABLED_RunAsTask";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  ASSERT_TRUE(a0->connect().ok());
  // Wait until the child holds its watch stream.
  absl::Time until = absl::Now() + absl::Seconds(10);  // generous: the child starts on a busy machine
  while (absl::Now() < until && !c.service->status().tasks[1].watching) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(c.service->status().tasks[1].watching);
  absl::Time killed = absl::Now();
  kill(pid, SIGKILL);
  int wstatus;
  waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(log.wait(absl::Seconds(3)));
  MutexLock l(&log.mu);
  absl::Duration detect = log.first_at - killed;
  std::printf("kill -9 of task 1 detected by task 0 after %s\n", absl::FormatDuration(detect).c_str());
  EXPECT_LT(detect, absl::Seconds(1));
  EXPECT_EQ(log.seen[0].task, 1);
  EXPECT_THAT(log.seen[0].message, HasSubstr("task 1 failed: connection to task 1 lost"));
}

// A coordinator that serves gRPC only: a gRPC client works, a fast-path client is told at once (not after its
// init timeout) what is wrong.
TEST(GrpcOnlyCoordinator, AFastPathClientFailsAtOnceSayingWhy) {
  ServiceOptions o;
  o.num_tasks = 1;
  auto service = *CoordinationService::create(o);
  GrpcServerOptions so;
  so.bind_address = "127.0.0.1:0";
  so.fast_path = false;
  auto server = *GrpcCoordinationServer::start(service.get(), so);
  EXPECT_FALSE(server->serves_fast_path());
  const std::string addr = absl::StrCat("127.0.0.1:", server->port());
  auto agent = grpc_agent(/*fast_path=*/true, addr, 0, 1, nullptr, absl::Seconds(20));
  absl::Time start = absl::Now();
  absl::Status s = agent->connect();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("does not speak mcx's fast path"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(make_client(/*fast_path=*/false, addr)->status(absl::Seconds(2)).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, Grpc, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "fast_path" : "grpc"; });

}  // namespace
}  // namespace mcx::distributed
