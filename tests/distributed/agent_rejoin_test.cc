// Agents of a recoverable job across a coordinator restart, over the in-process transport: an InProcessEndpoint
// shared by the agents' clients is taken down (the coordinator dies: calls in flight and watch streams fail with
// UNAVAILABLE) and pointed at a new, empty service (the coordinator is started again on the same address).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/coordination/agent_key_value.h"
#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/data_plane/gloo/gloo_kv_store.h"
#include "tests/distributed/test_agent_options.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

struct Failures {
  Mutex mu;
  std::vector<TaskFailure> seen ABSL_GUARDED_BY(mu);
  std::function<void(const TaskFailure&)> callback() {
    return [this](const TaskFailure& f) {
      MutexLock l(&mu);
      seen.push_back(f);
    };
  }
  // Waits for a failure whose message contains `needle`.
  std::optional<TaskFailure> wait_for(const std::string& needle, absl::Duration timeout) {
    MutexLock l(&mu);
    std::optional<TaskFailure> found;
    auto has = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (const TaskFailure& f : seen) {
        if (f.message.find(needle) != std::string::npos) found = f;
      }
      return found.has_value();
    };
    mu.await_for(has, timeout);
    return found;
  }
  size_t count() {
    MutexLock l(&mu);
    return seen.size();
  }
};

// Polls cond every 5 ms (real time: the agents' threads run on their own).
bool eventually(const std::function<bool()>& cond, absl::Duration timeout = absl::Seconds(10)) {
  absl::Time until = absl::Now() + timeout;
  while (!cond()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

class AgentRejoinTest : public ::testing::Test {
 protected:
  std::unique_ptr<CoordinationService> make_service(bool recoverable, absl::Duration heartbeat_timeout) {
    ServiceOptions o;
    o.num_tasks = n_;
    o.recoverable = recoverable;
    o.heartbeat_timeout = heartbeat_timeout;
    o.shutdown_timeout = absl::Seconds(3);
    return *CoordinationService::create(o);
  }
  void start(int n, bool recoverable = true, absl::Duration reconnect_timeout = absl::Seconds(10)) {
    n_ = n;
    recoverable_ = recoverable;
    service_ = make_service(recoverable, absl::Seconds(2));
    endpoint_ = std::make_unique<InProcessEndpoint>(service_.get());
    failures_.resize(n);
    agents_.resize(n);
    for (int i = 0; i < n; ++i) {
      failures_[i] = std::make_unique<Failures>();
      AgentOptions ao = test_agent_options(i, n, absl::Seconds(2));
      ao.recoverable = recoverable;
      ao.reconnect_timeout = reconnect_timeout;
      ao.on_failure = failures_[i]->callback();
      agents_[i] = std::make_unique<CoordinationAgent>(std::make_unique<InProcessClient>(*endpoint_), ao);
    }
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) ts.emplace_back([this, i] { EXPECT_TRUE(agents_[i]->connect().ok()); });
    for (auto& t : ts) t.join();
  }
  // kill -9 of the coordinator: its service is gone.
  void kill_coordinator() {
    endpoint_->disconnect();
    service_.reset();
  }
  // The coordinator is started again on the same address: a new, empty service.
  void start_coordinator(absl::Duration heartbeat_timeout = absl::Seconds(2)) {
    service_ = make_service(recoverable_, heartbeat_timeout);
    endpoint_->connect(service_.get());
  }
  std::vector<LiveTasks> agree(const std::vector<int>& who) {
    std::vector<LiveTasks> got(who.size());
    std::vector<std::thread> ts;
    for (size_t k = 0; k < who.size(); ++k) {
      ts.emplace_back([&, k] {
        absl::StatusOr<LiveTasks> l = agents_[who[k]]->get_live_tasks({}, absl::Seconds(5));
        ASSERT_TRUE(l.ok()) << l.status();
        got[k] = *l;
      });
    }
    for (auto& t : ts) t.join();
    return got;
  }
  void TearDown() override {
    agents_.clear();
    if (endpoint_) endpoint_->disconnect();
    service_.reset();
  }
  int n_ = 0;
  bool recoverable_ = true;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<InProcessEndpoint> endpoint_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
  std::vector<std::unique_ptr<Failures>> failures_;
};

TEST_F(AgentRejoinTest, AgentsRejoinRepublishTheirEntriesAndFinishTheCallsInFlight) {
  start(3);
  const Incarnation first_service = service_->service_incarnation();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(agents_[i]->kv_insert(absl::StrCat("mcx/task/", i, "/topology"), absl::StrCat("devices of ", i), true).ok());
  }
  ASSERT_TRUE(agents_[0]->kv_insert("scratch/a", "1").ok());
  ASSERT_TRUE(agents_[0]->kv_insert("scratch/b", "2").ok());
  ASSERT_EQ(*agents_[0]->kv_delete("scratch/a"), 1);
  {
    // The data plane's rendezvous writes through the agent.
    AgentKeyValue kv(agents_[1].get(), 1, 3);
    GlooKvStore store(kv, "mcx/dataplane/g/1.0/", absl::Now() + absl::Seconds(5));
    store.set("rank_1", std::vector<char>{'a', 'd', 'd', 'r'});
  }
  ASSERT_TRUE(agents_[2]->kv_increment("counter", 5).ok());
  const uint64_t before = agree({0, 1, 2})[0].generation;

  // In flight when the coordinator dies: a barrier (task 0 arrived) and a blocking get.
  absl::Status barrier0;
  std::thread t0([&] { barrier0 = agents_[0]->barrier("step", absl::Seconds(20)); });
  absl::StatusOr<std::string> late;
  std::thread t1([&] { late = agents_[1]->kv_get("late/key", absl::Seconds(20)); });
  ASSERT_TRUE(eventually([&] {
    ServiceStatus st = service_->status();
    return st.barriers.size() == 1 && st.barriers[0].arrived == std::vector<TaskId>({0});
  }));
  kill_coordinator();
  absl::SleepFor(absl::Milliseconds(300));  // the agents retry against nothing meanwhile
  start_coordinator();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(eventually([&] { return agents_[i]->rejoins() == 1; })) << "task " << i;

  ServiceStatus st = service_->status();
  EXPECT_TRUE(st.rebuilt);
  EXPECT_EQ(st.live_set_generation, before);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(st.tasks[i].info.state, TaskState::kConnected);
    EXPECT_EQ(st.tasks[i].info.incarnation, agents_[i]->incarnation());
    EXPECT_TRUE(st.tasks[i].rejoined);
    EXPECT_EQ(agents_[i]->service_incarnation(), service_->service_incarnation());
    // What a restarted process reads to learn the topology is there again.
    EXPECT_EQ(*service_->kv_try_get(absl::StrCat("mcx/task/", i, "/topology")), absl::StrCat("devices of ", i));
  }
  EXPECT_NE(service_->service_incarnation(), first_service);
  EXPECT_EQ(*service_->kv_try_get("mcx/dataplane/g/1.0/rank_1"), "addr");
  EXPECT_EQ(*service_->kv_try_get("scratch/b"), "2");
  EXPECT_EQ(service_->kv_try_get("scratch/a").status().code(), absl::StatusCode::kNotFound);  // deleted stays deleted
  EXPECT_EQ(service_->kv_try_get("counter").status().code(), absl::StatusCode::kNotFound);   // not owned: lost

  // The blocked get is answered by a write on the new service; the barrier meets again with the same counter.
  ASSERT_TRUE(agents_[2]->kv_insert("late/key", "here").ok());
  std::thread t2([&] { EXPECT_TRUE(agents_[1]->barrier("step", absl::Seconds(20)).ok()); });
  EXPECT_TRUE(agents_[2]->barrier("step", absl::Seconds(20)).ok());
  t0.join();
  t1.join();
  t2.join();
  EXPECT_TRUE(barrier0.ok()) << barrier0;
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, "here");
  // The live-set generation keeps growing across the restart.
  std::vector<LiveTasks> after = agree({0, 1, 2});
  EXPECT_EQ(after[0].generation, before + 1);
  EXPECT_EQ(after[0], after[2]);
  for (auto& f : failures_) EXPECT_EQ(f->count(), 0u);
  // A second restart works the same way.
  kill_coordinator();
  start_coordinator();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(eventually([&] { return agents_[i]->rejoins() == 2; })) << "task " << i;
  EXPECT_EQ(agree({0, 1, 2})[1].generation, before + 2);
}

TEST_F(AgentRejoinTest, ATaskThatDoesNotComeBackIsFailedAfterTheGrace) {
  start(3);
  kill_coordinator();
  agents_[2].reset();  // it died with the coordinator
  start_coordinator(/*heartbeat_timeout=*/absl::Seconds(1));
  absl::Time rebuilt = absl::Now();
  for (int i = 0; i < 2; ++i) {
    std::optional<TaskFailure> f = failures_[i]->wait_for("did not come back", absl::Seconds(10));
    ASSERT_TRUE(f.has_value()) << "task " << i << " was not told";
    EXPECT_EQ(f->task, 2);
    EXPECT_THAT(f->message, HasSubstr("task 2 failed: task 2 did not come back after the coordinator restarted"));
  }
  EXPECT_GE(absl::Now() - rebuilt, absl::Milliseconds(900));
  std::vector<LiveTasks> live = agree({0, 1});
  EXPECT_EQ(live[0].tasks, std::vector<TaskId>({0, 1}));
}

TEST_F(AgentRejoinTest, ACoordinatorThatDoesNotComeBackIsFatalAfterTheReconnectTimeout) {
  start(2, /*recoverable=*/true, /*reconnect_timeout=*/absl::Milliseconds(400));
  absl::Time killed = absl::Now();
  kill_coordinator();
  for (int i = 0; i < 2; ++i) {
    std::optional<TaskFailure> f = failures_[i]->wait_for("could not rejoin", absl::Seconds(5));
    ASSERT_TRUE(f.has_value()) << "task " << i;
    EXPECT_EQ(f->task, -1);
    EXPECT_THAT(f->message, HasSubstr("lost the coordination service at in-process: could not rejoin it within 400ms"));
  }
  EXPECT_GE(absl::Now() - killed, absl::Milliseconds(400));
  // Later calls fail at once with the same reason.
  absl::Time t = absl::Now();
  absl::Status s = agents_[0]->kv_insert("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("[kv_insert] lost the coordination service"));
  EXPECT_LT(absl::Now() - t, absl::Seconds(1));  // not the 10 s RPC deadline
}

TEST_F(AgentRejoinTest, AFateSharingJobDoesNotRejoin) {
  start(2, /*recoverable=*/false);
  kill_coordinator();
  for (int i = 0; i < 2; ++i) {
    std::optional<TaskFailure> f = failures_[i]->wait_for("lost the coordination service", absl::Seconds(2));
    ASSERT_TRUE(f.has_value()) << "task " << i;
    EXPECT_EQ(f->task, -1);
  }
  start_coordinator();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(agents_[0]->rejoins(), 0);
  EXPECT_EQ(service_->job_state().tasks[0].state, TaskState::kDisconnected);
}

}  // namespace
}  // namespace mcx::distributed
