// A coordination service that replaced a lost coordinator, rebuilt from rejoining tasks (rejoin_task): rejoins
// answered at once, heartbeats checked from the first rejoin, tasks that do not come back failed after the
// grace, live-set agreements held until the membership is rebuilt, the generation floor, a restarted task's
// registration, barriers met again. ManualClock throughout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>

#include "mcx/distributed/coordination/service.h"
#include "tests/distributed/manual_clock_service.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

class RejoinTest : public ::testing::Test {
 protected:
  // The service a restarted coordinator starts: empty, tasks 0..n-1 known only by count.
  std::unique_ptr<CoordinationService> make(int n, bool recoverable = true) {
    return make_service(manual_clock_options(&clock_, n, recoverable));
  }
  ManualClock clock_;
};

TEST_F(RejoinTest, ARejoiningTaskIsConnectedAtOnceAndTheOthersAreExpectedBack) {
  auto s = make(3);
  absl::StatusOr<RegisterResult> r = s->rejoin_task(1, 101, 3, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->service_incarnation, s->service_incarnation());
  JobState js = s->job_state();
  EXPECT_EQ(js.tasks[1].state, TaskState::kConnected);
  EXPECT_EQ(js.tasks[1].incarnation, 101u);
  EXPECT_EQ(js.tasks[0].state, TaskState::kDisconnected);
  // A retried rejoin is a no-op; the rejoined task heartbeats as usual.
  EXPECT_TRUE(s->rejoin_task(1, 101, 3, 0).ok());
  EXPECT_TRUE(s->heartbeat(1, 101).ok());
  ASSERT_TRUE(s->rejoin_task(0, 100, 3, 0).ok());
  ServiceStatus st = s->status();
  EXPECT_TRUE(st.rebuilt);
  EXPECT_TRUE(st.tasks[0].rejoined);
  EXPECT_TRUE(st.tasks[1].rejoined);
  EXPECT_FALSE(st.tasks[2].rejoined);
  // Task 2 does not come back: failed once the grace (the heartbeat timeout) after the first rejoin has passed.
  clock_.advance(absl::Seconds(6));
  EXPECT_TRUE(s->heartbeat(0, 100).ok());
  EXPECT_TRUE(s->heartbeat(1, 101).ok());
  s->check_timeouts();
  EXPECT_EQ(s->job_state().tasks[2].state, TaskState::kDisconnected);
  clock_.advance(absl::Seconds(5));
  s->check_timeouts();
  js = s->job_state();
  EXPECT_EQ(js.tasks[2].state, TaskState::kError);
  EXPECT_EQ(js.tasks[2].error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(js.tasks[2].error.message(), HasSubstr("task 2 did not come back after the coordinator restarted"));
  EXPECT_EQ(js.tasks[0].state, TaskState::kConnected);
  EXPECT_TRUE(js.job_error.ok());
  // Coming back too late is refused: the others were told it failed.
  absl::StatusOr<RegisterResult> late = s->rejoin_task(2, 102, 3, 0);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("did not come back"));
  // Heartbeats are checked for the rejoined tasks too (the job counts as assembled).
  clock_.advance(absl::Seconds(11));
  s->check_timeouts();
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kError);
}

TEST_F(RejoinTest, RejoinErrors) {
  auto fate_sharing = make(2, /*recoverable=*/false);
  absl::StatusOr<RegisterResult> r = fate_sharing->rejoin_task(0, 100, 2, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("not recoverable"));

  auto s = make(2);
  EXPECT_EQ(s->rejoin_task(0, 100, 3, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->rejoin_task(2, 100, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->rejoin_task(0, 0, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // A restarted process registered as task 1 first: the old incarnation cannot rejoin in its place.
  Result<absl::StatusOr<RegisterResult>> fresh;
  s->register_task(1, 999, 2, absl::Seconds(30), fresh.cb());
  r = s->rejoin_task(1, 101, 2, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("a restarted process took its place"));
}

TEST_F(RejoinTest, ARestartedTaskRegistersOnceTheJobIsKnownToBeAssembled) {
  auto s = make(3);
  // The restarted process registers before anyone rejoined: the service cannot tell it from a new job yet.
  Result<absl::StatusOr<RegisterResult>> fresh;
  s->register_task(2, 777, 3, absl::Seconds(30), fresh.cb());
  EXPECT_FALSE(fresh.ready());
  ASSERT_TRUE(s->rejoin_task(0, 100, 3, 0).ok());
  ASSERT_TRUE(fresh.get().ok());  // the first rejoin says the job was assembled
  // Later restarts register at once.
  ASSERT_TRUE(s->rejoin_task(1, 101, 3, 0).ok());
  s->fail_task(2, absl::UnavailableError("killed"));
  Result<absl::StatusOr<RegisterResult>> again;
  s->register_task(2, 778, 3, absl::Seconds(30), again.cb());
  ASSERT_TRUE(again.get().ok());
  ServiceStatus st = s->status();
  EXPECT_FALSE(st.tasks[2].rejoined);
  EXPECT_EQ(st.tasks[2].info.incarnation, 778u);
}

TEST_F(RejoinTest, LiveSetsWaitForTheMembershipAndContinueAboveTheReportedGenerations) {
  auto s = make(3);
  ASSERT_TRUE(s->rejoin_task(0, 100, 3, /*live_set_generation=*/7).ok());
  ASSERT_TRUE(s->rejoin_task(1, 101, 3, /*live_set_generation=*/5).ok());
  // Tasks 0 and 1 agree over {0, 1}: held while task 2 may still come back (its generation is not known yet).
  Result<absl::StatusOr<LiveTasks>> a0, a1;
  s->get_live_tasks(0, 100, LiveSetRequest{{0, 1}, "", ""}, absl::Seconds(60), a0.cb());
  s->get_live_tasks(1, 101, LiveSetRequest{{0, 1}, "", ""}, absl::Seconds(60), a1.cb());
  EXPECT_FALSE(a0.ready());
  EXPECT_EQ(s->status().live_set_generation, 7u);
  ASSERT_TRUE(s->rejoin_task(2, 102, 3, /*live_set_generation=*/9).ok());
  absl::StatusOr<LiveTasks> l0 = a0.get();
  ASSERT_TRUE(l0.ok()) << l0.status();
  EXPECT_EQ(l0->tasks, std::vector<TaskId>({0, 1}));
  EXPECT_EQ(l0->generation, 10u);  // above every generation reported
  EXPECT_EQ(*a1.get(), *l0);
  // Another set gets the next number.
  Result<absl::StatusOr<LiveTasks>> b0, b1, b2;
  s->get_live_tasks(0, 100, {}, absl::Seconds(60), b0.cb());
  s->get_live_tasks(1, 101, {}, absl::Seconds(60), b1.cb());
  s->get_live_tasks(2, 102, {}, absl::Seconds(60), b2.cb());
  EXPECT_EQ(b2.get()->generation, 11u);
  // A floor below what was numbered changes nothing.
  EXPECT_TRUE(s->rejoin_task(2, 102, 3, 3).ok());
  EXPECT_EQ(s->status().live_set_generation, 11u);
}

TEST_F(RejoinTest, ALiveSetCompletesWithoutATaskThatDidNotComeBack) {
  auto s = make(3);
  ASSERT_TRUE(s->rejoin_task(0, 100, 3, 4).ok());
  ASSERT_TRUE(s->rejoin_task(1, 101, 3, 4).ok());
  Result<absl::StatusOr<LiveTasks>> a0, a1;
  s->get_live_tasks(0, 100, {}, absl::Seconds(60), a0.cb());
  s->get_live_tasks(1, 101, {}, absl::Seconds(60), a1.cb());
  clock_.advance(absl::Seconds(5));
  EXPECT_TRUE(s->heartbeat(0, 100).ok());
  EXPECT_TRUE(s->heartbeat(1, 101).ok());
  s->check_timeouts();
  EXPECT_FALSE(a0.ready());
  clock_.advance(absl::Seconds(6));
  s->check_timeouts();  // task 2 failed: the agreement completes without it
  absl::StatusOr<LiveTasks> l = a0.get();
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->tasks, std::vector<TaskId>({0, 1}));
  EXPECT_EQ(l->generation, 5u);
}

TEST_F(RejoinTest, ALiveSetTimeoutNamesTheTasksExpectedBack) {
  auto s = make(2);
  ASSERT_TRUE(s->rejoin_task(0, 100, 2, 0).ok());
  Result<absl::StatusOr<LiveTasks>> a;
  s->get_live_tasks(0, 100, LiveSetRequest{{0}, "x", ""}, absl::Seconds(2), a.cb());
  clock_.advance(absl::Seconds(3));
  s->check_timeouts();
  EXPECT_EQ(a.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a.get().status().message(), HasSubstr("for tasks {1} to come back after the coordinator restarted"));
}

TEST_F(RejoinTest, ABarrierRetriedWithTheSameCounterMeetsAgain) {
  auto s = make(2);
  ASSERT_TRUE(s->rejoin_task(0, 100, 2, 0).ok());
  ASSERT_TRUE(s->rejoin_task(1, 101, 2, 0).ok());
  // Instance 5 was in flight when the old coordinator died: the new one has no record and both meet in it.
  Result<absl::Status> b0, b1;
  s->barrier(0, 100, "step", 5, {}, absl::Seconds(10), b0.cb());
  EXPECT_FALSE(b0.ready());
  s->barrier(1, 101, "step", 5, {}, absl::Seconds(10), b1.cb());
  EXPECT_TRUE(b0.get().ok());
  EXPECT_TRUE(b1.get().ok());
  Result<absl::Status> c0, c1;
  s->barrier(0, 100, "step", 6, {}, absl::Seconds(10), c0.cb());
  s->barrier(1, 101, "step", 6, {}, absl::Seconds(10), c1.cb());
  EXPECT_TRUE(c1.get().ok());
}

// The old coordinator died while answering instance 6: task 1 got its answer and moved on, tasks 0 and 2 retry
// the instance here. Task 1 reports the instance it passed when it rejoins, so the instance completes at once for
// those waiting in it and for those that retry it later; older and newer instances are untouched.
TEST_F(RejoinTest, AnInstanceOneTaskPassedIsCompleteForTheOthers) {
  auto s = make(3);
  ASSERT_TRUE(s->rejoin_task(0, 100, 3, 0).ok());
  Result<absl::Status> b0;
  s->barrier(0, 100, "churn", 6, {}, absl::Seconds(10), b0.cb());
  EXPECT_FALSE(b0.ready());
  ASSERT_TRUE(s->rejoin_task(1, 101, 3, 0, {{"churn", 6}, {"other", 2}}).ok());
  EXPECT_TRUE(b0.get().ok());  // waiting in it: answered
  ASSERT_TRUE(s->rejoin_task(2, 102, 3, 0).ok());
  Result<absl::Status> b2;
  s->barrier(2, 102, "churn", 6, {}, absl::Seconds(10), b2.cb());
  EXPECT_TRUE(b2.get().ok());  // retrying it later: answered at once
  Result<absl::Status> o0;
  s->barrier(0, 100, "other", 2, {}, absl::Seconds(10), o0.cb());  // an instance no one here had started
  EXPECT_TRUE(o0.get().ok());
  // The next instance is a normal barrier again.
  Result<absl::Status> c0, c1, c2;
  s->barrier(0, 100, "churn", 7, {}, absl::Seconds(10), c0.cb());
  s->barrier(1, 101, "churn", 7, {}, absl::Seconds(10), c1.cb());
  EXPECT_FALSE(c0.ready());
  s->barrier(2, 102, "churn", 7, {}, absl::Seconds(10), c2.cb());
  EXPECT_TRUE(c0.get().ok());
  // A report of an instance older than the current one changes nothing.
  ASSERT_TRUE(s->rejoin_task(1, 101, 3, 0, {{"churn", 3}}).ok());
  Result<absl::Status> d0;
  s->barrier(0, 100, "churn", 8, {}, absl::Seconds(10), d0.cb());
  EXPECT_FALSE(d0.ready());
}

}  // namespace
}  // namespace mcx::distributed
