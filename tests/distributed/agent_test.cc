// CoordinationAgent over the in-process transport: connect, KV, barriers, live tasks, failure
// notification (callback instead of exit), recoverable membership changes, shutdown.
#include "mcx/distributed/coordination/agent.h"
#include "tests/distributed/test_agent_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

struct Failures {
  Mutex mu;
  std::vector<TaskFailure> seen;
  std::function<void(const TaskFailure&)> callback() {
    return [this](const TaskFailure& f) {
      MutexLock l(&mu);
      seen.push_back(f);
    };
  }
  // Waits until at least one failure arrived; returns how long that took.
  std::optional<absl::Duration> wait(absl::Duration timeout) {
    absl::Time start = absl::Now();
    MutexLock l(&mu);
    auto has = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !seen.empty(); };
    if (!mu.await_for(has, timeout)) return std::nullopt;
    return absl::Now() - start;
  }
};

class AgentTest : public ::testing::Test {
 protected:
  void start(int n, bool recoverable = false) {
    ServiceOptions o;
    o.num_tasks = n;
    o.recoverable = recoverable;
    o.heartbeat_timeout = absl::Seconds(2);
    o.shutdown_timeout = absl::Seconds(3);
    service_ = *CoordinationService::create(o);
    failures_.resize(n);
    for (int i = 0; i < n; ++i) failures_[i] = std::make_unique<Failures>();
    std::vector<std::thread> ts;
    agents_.resize(n);
    clients_.resize(n);
    for (int i = 0; i < n; ++i) {
      auto c = std::make_unique<InProcessClient>(service_.get());
      clients_[i] = c.get();
      AgentOptions ao = test_agent_options(i, n, absl::Seconds(2));
      ao.shutdown_timeout = absl::Seconds(3);
      ao.on_failure = failures_[i]->callback();
      agents_[i] = std::make_unique<CoordinationAgent>(std::move(c), ao);
    }
    for (int i = 0; i < n; ++i) ts.emplace_back([this, i] { EXPECT_TRUE(agents_[i]->connect().ok()); });
    for (auto& t : ts) t.join();
  }
  void TearDown() override {
    agents_.clear();
    service_.reset();
  }
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
  std::vector<InProcessClient*> clients_;
  std::vector<std::unique_ptr<Failures>> failures_;
};

// A task that has begun to shut down does not fail when it loses the coordinator (the coordinator of a finished job
// exits as soon as the last shutdown completes, possibly before this task read its reply): the loss is the
// shutdown's error, and on_failure (fate-sharing: the process's exit) is not called.
TEST_F(AgentTest, LosingTheCoordinatorWhileShuttingDownIsNotATaskFailure) {
  start(2);
  absl::Status shutdown;
  std::thread leaving([&] { shutdown = agents_[0]->shutdown(); });  // waits for task 1 at the shutdown barrier
  absl::SleepFor(absl::Milliseconds(200));
  clients_[0]->simulate_connection_loss();
  leaving.join();
  EXPECT_FALSE(shutdown.ok());
  EXPECT_FALSE(failures_[0]->wait(absl::Milliseconds(300)).has_value()) << failures_[0]->seen[0].message;
}

TEST_F(AgentTest, KvBarrierLiveTasksAndShutdown) {
  start(3);
  EXPECT_NE(agents_[0]->incarnation(), agents_[1]->incarnation());
  ASSERT_TRUE(agents_[0]->kv_insert("x/0", "zero").ok());
  EXPECT_EQ(*agents_[2]->kv_get("x/0", absl::Seconds(1)), "zero");
  EXPECT_EQ(*agents_[1]->kv_increment("n", 2), 2);
  EXPECT_EQ(*agents_[2]->kv_increment("n", 3), 5);
  EXPECT_EQ(agents_[1]->kv_dir("x")->size(), 1u);
  EXPECT_EQ(*agents_[1]->kv_delete("x"), 1);
  // Reuse of one barrier name, three times, from threads.
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) {
      ts.emplace_back([&, i] { EXPECT_TRUE(agents_[i]->barrier("step", absl::Seconds(3)).ok()); });
    }
    for (auto& t : ts) t.join();
  }
  // Live tasks: every caller gets the same answer.
  std::vector<LiveTasks> got(3);
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { got[i] = *agents_[i]->get_live_tasks({}, absl::Seconds(3)); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(got[0].tasks, std::vector<TaskId>({0, 1, 2}));
  EXPECT_EQ(got[0].incarnations[1], agents_[1]->incarnation());
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[1], got[2]);
  // Shutdown barrier: all three leave together.
  ts.clear();
  for (int i = 0; i < 3; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents_[i]->shutdown().ok()); });
  for (auto& t : ts) t.join();
  EXPECT_FALSE(agents_[0]->connected());
  for (const TaskInfo& t : service_->job_state().tasks) EXPECT_EQ(t.state, TaskState::kShutdown);
  for (auto& f : failures_) EXPECT_TRUE(f->seen.empty());
}

TEST_F(AgentTest, ConnectionLossIsReportedToEveryOtherTask) {
  start(3);
  clients_[2]->simulate_connection_loss();  // task 2 "dies"
  for (int i = 0; i < 2; ++i) {
    auto took = failures_[i]->wait(absl::Seconds(2));
    ASSERT_TRUE(took.has_value()) << "task " << i << " was not told";
    EXPECT_LT(*took, absl::Milliseconds(500));
    MutexLock l(&failures_[i]->mu);
    EXPECT_EQ(failures_[i]->seen[0].task, 2);
    EXPECT_THAT(failures_[i]->seen[0].message, HasSubstr("task 2 failed: connection to task 2 lost"));
  }
  // A barrier now fails at once instead of waiting for its timeout.
  absl::Time start = absl::Now();
  absl::Status b = agents_[0]->barrier("after", absl::Seconds(10));
  EXPECT_EQ(b.code(), absl::StatusCode::kAborted);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_F(AgentTest, BarrierTimeoutNamesTheStuckTask) {
  start(3);
  std::vector<std::thread> ts;
  std::vector<absl::Status> st(2);
  for (int i = 0; i < 2; ++i) ts.emplace_back([&, i] { st[i] = agents_[i]->barrier("b", absl::Milliseconds(300)); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(st[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(st[0], st[1]);
  EXPECT_THAT(st[0].message(), HasSubstr("missing: task 2 (connected, last heartbeat"));
}

TEST_F(AgentTest, CancelBarrierWakesWaiter) {
  start(2);
  absl::Status st;
  std::thread t([&] { st = agents_[0]->barrier("c", absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(agents_[0]->cancel_barrier("c").ok());
  t.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
}

TEST_F(AgentTest, ReportErrorPropagates) {
  start(2);
  ASSERT_TRUE(agents_[1]->report_error(absl::InternalError("disk full")).ok());
  ASSERT_TRUE(failures_[0]->wait(absl::Seconds(2)).has_value());
  MutexLock l(&failures_[0]->mu);
  EXPECT_THAT(failures_[0]->seen[0].message, HasSubstr("task 1 failed: reported an error: disk full"));
}

TEST_F(AgentTest, RecoverableRestartRejoins) {
  start(2, /*recoverable=*/true);
  std::vector<JobState> states;
  clients_[1]->simulate_connection_loss();
  ASSERT_TRUE(failures_[0]->wait(absl::Seconds(2)).has_value());  // on_failure hears of it
  EXPECT_TRUE(service_->job_state().job_error.ok());
  // The "restarted" process: a new agent, new incarnation, same task id.
  AgentOptions ao;
  ao.task_id = 1;
  ao.num_tasks = 2;
  ao.init_timeout = absl::Seconds(2);
  ao.heartbeat_interval = absl::Milliseconds(100);
  ao.on_failure = [](const TaskFailure&) {};
  agents_[1].reset();
  auto restarted = std::make_unique<CoordinationAgent>(std::make_unique<InProcessClient>(service_.get()), ao);
  ASSERT_TRUE(restarted->connect().ok());
  LiveTasks a, b;
  std::thread t([&] { a = *agents_[0]->get_live_tasks({}, absl::Seconds(2)); });
  b = *restarted->get_live_tasks({}, absl::Seconds(2));
  t.join();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.incarnations[1], restarted->incarnation());
  restarted.reset();
}

TEST(AgentConnect, TimesOutNamingMissingTasks) {
  ServiceOptions o;
  o.num_tasks = 3;
  auto service = *CoordinationService::create(o);
  AgentOptions ao;
  ao.task_id = 0;
  ao.num_tasks = 3;
  ao.init_timeout = absl::Milliseconds(300);
  CoordinationAgent a(std::make_unique<InProcessClient>(service.get()), ao);
  absl::Status s = a.connect();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("missing task ids: 1, 2"));
}

}  // namespace
}  // namespace mcx::distributed
