// PreemptionSync over the in-process coordination service: several agents in one process, each driven by a
// thread that plays one process's step loop. Checked: one sync step for every process whatever its step and
// speed, steps separated by barriers (collectives) do not deadlock against the agreement, a dead process is
// not waited for, the deadline names the processes that did not report, and the caller's errors.
#include "mcx/distributed/coordination/preemption_sync.h"
#include "tests/distributed/test_agent_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace mcx::distributed {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PreemptionSyncTest : public ::testing::Test {
 protected:
  void start(int n, bool recoverable = false, absl::Duration timeout = absl::Seconds(10)) {
    ServiceOptions o;
    o.num_tasks = n;
    o.recoverable = recoverable;
    o.heartbeat_timeout = absl::Seconds(5);
    o.shutdown_timeout = absl::Seconds(3);
    service_ = *CoordinationService::create(o);
    agents_.resize(n);
    clients_.resize(n);
    for (int i = 0; i < n; ++i) {
      auto c = std::make_unique<InProcessClient>(service_.get());
      clients_[i] = c.get();
      AgentOptions ao = test_agent_options(i, n, absl::Seconds(5));
      ao.on_failure = [](const TaskFailure&) {};  // recoverable tests kill tasks; nobody exits
      agents_[i] = std::make_unique<CoordinationAgent>(std::move(c), ao);
    }
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) ts.emplace_back([this, i] { EXPECT_TRUE(agents_[i]->connect().ok()); });
    for (auto& t : ts) t.join();
    PreemptionSyncOptions po;
    po.timeout = timeout;
    // Long slices: wake-ups end the watcher's waits, and few timeouts keep statuses made on the service's timer
    // thread (see tests/tsan.supp on absl::Status) out of the normal path.
    po.watch_slice = absl::Seconds(30);
    po.agreement_slice = absl::Seconds(1);
    for (int i = 0; i < n; ++i) syncs_.push_back(std::make_unique<PreemptionSync>(agents_[i].get(), po));
  }
  void TearDown() override {
    syncs_.clear();  // before the agents they use
    agents_.clear();
    service_.reset();
  }
  // Waits until the service sees `task` as failed.
  void wait_failed(TaskId task) {
    const absl::Time until = absl::Now() + absl::Seconds(5);
    while (absl::Now() < until && service_->job_state().tasks[task].state != TaskState::kError) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_EQ(service_->job_state().tasks[task].state, TaskState::kError);
  }

  // What one process's step loop saw.
  struct Run {
    std::vector<int64_t> true_steps;  // the steps at which reached_sync_point returned true
    int64_t last_step = -1;
    absl::Status error;
  };
  // Runs process i's loop from `first` with `pause` per step until `steps` steps passed after a true (or an
  // error, or `limit` steps); `before_step` runs ahead of each call.
  Run loop(int i, int64_t first, absl::Duration pause, int64_t limit, int after_true = 5,
           const std::function<void(int64_t)>& before_step = nullptr) {
    Run r;
    int left = -1;
    for (int64_t step = first; step < first + limit && left != 0; ++step) {
      if (before_step) before_step(step);
      absl::StatusOr<bool> reached = syncs_[i]->reached_sync_point(step);
      r.last_step = step;
      if (!reached.ok()) {
        r.error = reached.status();
        return r;
      }
      if (*reached) {
        r.true_steps.push_back(step);
        left = after_true;
      }
      if (left > 0) --left;
      absl::SleepFor(pause);
    }
    return r;
  }

  std::unique_ptr<CoordinationService> service_;
  std::vector<std::unique_ptr<CoordinationAgent>> agents_;
  std::vector<InProcessClient*> clients_;
  std::vector<std::unique_ptr<PreemptionSync>> syncs_;
};

TEST_F(PreemptionSyncTest, ProcessesAtDifferentStepsAndSpeedsGetOneSyncStep) {
  constexpr int n = 3;
  start(n);
  const int64_t first[n] = {0, 40, 7};  // each process is somewhere else in its loop
  std::vector<Run> runs(n);
  std::atomic<int64_t> noticed_at{-1};
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([&, i] {
      runs[i] = loop(i, first[i], absl::Milliseconds(1 + 2 * i), 2000, 5, [&, i](int64_t step) {
        if (i == 1 && step == first[1] + 30) {
          noticed_at = step - 1;  // the last step process 1 passed
          EXPECT_TRUE(syncs_[1]->notify("test: process 1 is preempted").ok());
        }
      });
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_TRUE(syncs_[0]->sync_point().has_value());
  const PreemptionSyncPoint p = *syncs_[0]->sync_point();
  EXPECT_THAT(p.processes, ElementsAre(0, 1, 2));
  EXPECT_EQ(p.step, *std::max_element(p.steps.begin(), p.steps.end()) + 1);
  EXPECT_GT(p.step, noticed_at.load());
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(runs[i].error.ok()) << runs[i].error;
    EXPECT_THAT(runs[i].true_steps, ElementsAre(p.step));  // exactly once, at the same step
    EXPECT_EQ(syncs_[i]->sync_point()->step, p.step);
    EXPECT_EQ(*syncs_[i]->notice(), "test: process 1 is preempted");
  }
}

// Every step ends in a barrier (as a collective would): a process that learned of the notice must not block
// in its call while another still steps towards the barrier with it.
TEST_F(PreemptionSyncTest, StepsSeparatedByBarriersDoNotDeadlock) {
  constexpr int n = 3;
  start(n);
  std::vector<Run> runs(n);
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([&, i] {
      runs[i] = loop(i, 100, absl::ZeroDuration(), 500, 3, [&, i](int64_t step) {
        if (i == 2 && step == 110) {
          EXPECT_TRUE(syncs_[2]->notify("test").ok());
        }
        if (step > 100) {
          absl::Status b = agents_[i]->barrier("step", absl::Seconds(5));
          EXPECT_TRUE(b.ok()) << b;
        }
      });
    });
  }
  for (auto& t : ts) t.join();
  const int64_t sync = syncs_[0]->sync_point()->step;
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(runs[i].error.ok()) << runs[i].error;
    EXPECT_THAT(runs[i].true_steps, ElementsAre(sync));
  }
}

TEST_F(PreemptionSyncTest, ADeadProcessIsNotWaitedFor) {
  constexpr int n = 3;
  start(n, /*recoverable=*/true);
  clients_[2]->simulate_connection_loss();  // process 2 dies before the notice
  wait_failed(2);
  std::vector<Run> runs(2);
  std::vector<std::thread> ts;
  const absl::Time begin = absl::Now();
  for (int i = 0; i < 2; ++i) {
    ts.emplace_back([&, i] {
      runs[i] = loop(i, 0, absl::Milliseconds(1), 1000, 3, [&, i](int64_t step) {
        if (i == 0 && step == 5) {
          EXPECT_TRUE(syncs_[0]->notify("test").ok());
        }
      });
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));  // not the 10 s timeout
  const PreemptionSyncPoint p = *syncs_[0]->sync_point();
  EXPECT_THAT(p.processes, ElementsAre(0, 1));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(runs[i].error.ok()) << runs[i].error;
    EXPECT_THAT(runs[i].true_steps, ElementsAre(p.step));
  }
}

// Process 2 is live but never calls; the others wait in the agreement until it dies, then carry on without it.
TEST_F(PreemptionSyncTest, AProcessDyingDuringTheAgreementIsNoLongerWaitedFor) {
  constexpr int n = 3;
  start(n, /*recoverable=*/true);
  std::vector<Run> runs(2);
  std::vector<std::thread> ts;
  ASSERT_TRUE(syncs_[1]->notify("test").ok());
  for (int i = 0; i < 2; ++i) {
    ts.emplace_back([&, i] { runs[i] = loop(i, 0, absl::Milliseconds(1), 1000, 3); });
  }
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(syncs_[0]->sync_point().has_value());  // still waiting for process 2
  const absl::Time killed = absl::Now();
  clients_[2]->simulate_connection_loss();
  for (auto& t : ts) t.join();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
  const PreemptionSyncPoint p = *syncs_[0]->sync_point();
  EXPECT_THAT(p.processes, ElementsAre(0, 1));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(runs[i].error.ok()) << runs[i].error;
    EXPECT_THAT(runs[i].true_steps, ElementsAre(p.step));
  }
}

TEST_F(PreemptionSyncTest, DeadlineNamesTheProcessesThatDidNotReport) {
  constexpr int n = 4;
  start(n, /*recoverable=*/false, absl::Milliseconds(600));
  ASSERT_TRUE(syncs_[0]->notify("test").ok());
  std::vector<Run> runs(2);
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i) {  // processes 2 and 3 never call
    ts.emplace_back([&, i] { runs[i] = loop(i, 0, absl::Milliseconds(1), 5000, 3); });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(runs[i].error.code(), absl::StatusCode::kDeadlineExceeded) << runs[i].error;
    EXPECT_THAT(runs[i].error.message(), HasSubstr("[reached_preemption_sync_point] process "));
    EXPECT_THAT(runs[i].error.message(), HasSubstr("processes {2, 3} did not"));
    EXPECT_TRUE(runs[i].true_steps.empty());
    // Sticky: the next call reports it again.
    EXPECT_EQ(syncs_[i]->reached_sync_point(runs[i].last_step + 1).status(), runs[i].error);
  }
}

TEST_F(PreemptionSyncTest, StepsMustGrowAndMayNotSkipTheSyncStep) {
  start(1);
  ASSERT_TRUE(*syncs_[0]->reached_sync_point(10) == false);
  absl::StatusOr<bool> again = syncs_[0]->reached_sync_point(10);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(again.status().message(), HasSubstr("expected a step larger than the previous call's (10), got 10"));
  ASSERT_TRUE(syncs_[0]->notify("test").ok());
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!syncs_[0]->sync_point() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(syncs_[0]->sync_point()->step, 11);  // one process: its last step + 1
  absl::StatusOr<bool> skipped = syncs_[0]->reached_sync_point(12);
  EXPECT_EQ(skipped.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skipped.status().message(), HasSubstr("expected a call with step 11"));
}

TEST_F(PreemptionSyncTest, OnlyTheFirstNoticeCountsAndLateCallsAfterTheSyncStepReturnFalse) {
  start(2);
  ASSERT_TRUE(syncs_[0]->notify("first").ok());
  ASSERT_TRUE(syncs_[1]->notify("second").ok());  // no-op
  std::vector<Run> runs(2);
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; ++i) ts.emplace_back([&, i] { runs[i] = loop(i, 0, absl::Milliseconds(1), 1000, 10); });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(*syncs_[i]->notice(), "first");
    EXPECT_EQ(runs[i].true_steps.size(), 1u);
    EXPECT_GT(runs[i].last_step, runs[i].true_steps[0]);  // and the calls after it returned false
  }
}

TEST_F(PreemptionSyncTest, StopJoinsTheWatcherPromptlyAndRefusesLaterCalls) {
  start(2);
  ASSERT_TRUE(syncs_[0]->reached_sync_point(0).ok());  // starts the watcher, which waits on its key
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time begin = absl::Now();
  syncs_[0]->stop();
  EXPECT_LT(absl::Now() - begin, absl::Milliseconds(500));  // woken through its key, not after a 30 s slice
  EXPECT_EQ(syncs_[0]->reached_sync_point(1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(syncs_[0]->notify("late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(agents_[0]->kv_try_get("mcx/task/0/inbox/preemption_wake").ok());  // its wake key is cleaned up
}

}  // namespace
}  // namespace mcx::distributed
