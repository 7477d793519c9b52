// The coordination service's metrics (service_metrics.h) under a ManualClock, so latencies are exact: a barrier
// and a live-set agreement whose last member arrives 3 ms after the first land in the 4 ms bucket; a timed-out
// barrier counts by its status code; a task whose heartbeats stop counts as a heartbeat timeout and a failure;
// tasks by state follow the job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mcx/distributed/coordination/service.h"
#include "tests/distributed/manual_clock_service.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

class ServiceMetricsTest : public ::testing::Test {
 protected:
  std::unique_ptr<CoordinationService> make(int n) {
    return make_service(manual_clock_options(&clock_, n, /*recoverable=*/true));
  }
  ManualClock clock_;
};

TEST_F(ServiceMetricsTest, EventsAndTheirLatenciesAreCounted) {
  auto s = make(2);
  register_all(*s, 2);
  Result<absl::Status> b0, b1;
  s->barrier(0, 100, "b", 0, {}, absl::Seconds(5), b0.cb());
  clock_.advance(absl::Milliseconds(3));
  s->barrier(1, 101, "b", 0, {}, absl::Seconds(5), b1.cb());
  ASSERT_TRUE(b0.get().ok());
  Result<absl::StatusOr<LiveTasks>> l0, l1;
  s->get_live_tasks(0, 100, LiveSetRequest{}, absl::Seconds(5), l0.cb());
  clock_.advance(absl::Milliseconds(3));
  s->get_live_tasks(1, 101, LiveSetRequest{}, absl::Seconds(5), l1.cb());
  ASSERT_TRUE(l0.get().ok());
  // A barrier only task 0 reaches times out.
  Result<absl::Status> t0;
  s->barrier(0, 100, "t", 0, {}, absl::Seconds(1), t0.cb());
  ASSERT_TRUE(s->heartbeat(0, 100).ok());
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  EXPECT_EQ(t0.get().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string before_failure = s->metrics_registry().text();
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_registrations_total{kind=\"register\"} 2\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_heartbeats_total 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barriers_total{result=\"ok\"} 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barriers_total{result=\"DEADLINE_EXCEEDED\"} 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barrier_seconds_bucket{le=\"0.002\"} 0\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barrier_seconds_bucket{le=\"0.004\"} 1\n"));
  // The timed-out barrier's result came when its expiry was noticed, 2 s after its first arrival.
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barrier_seconds_bucket{le=\"1.024\"} 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barrier_seconds_bucket{le=\"2.048\"} 2\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_barrier_seconds_count 2\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_live_set_agreements_total 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_live_set_agreement_seconds_bucket{le=\"0.002\"} 0\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_live_set_agreement_seconds_bucket{le=\"0.004\"} 1\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_live_set_agreement_seconds_sum 0.003\n"));
  EXPECT_THAT(before_failure, HasSubstr("mcx_coordinator_tasks{state=\"connected\"} 2\n"));
  // Task 1 stops heartbeating: its heartbeat timeout fails it (the job carries on: recoverable).
  ASSERT_TRUE(s->heartbeat(0, 100).ok());
  clock_.advance(absl::Seconds(9));
  ASSERT_TRUE(s->heartbeat(0, 100).ok());
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  const std::string after = s->metrics_registry().text();
  EXPECT_THAT(after, HasSubstr("mcx_coordinator_heartbeat_timeouts_total 1\n"));
  EXPECT_THAT(after, HasSubstr("mcx_coordinator_task_failures_total 1\n"));
  EXPECT_THAT(after, HasSubstr("mcx_coordinator_job_failures_total 0\n"));
  EXPECT_THAT(after, HasSubstr("mcx_coordinator_tasks{state=\"connected\"} 1\n"));
  EXPECT_THAT(after, HasSubstr("mcx_coordinator_tasks{state=\"error\"} 1\n"));
}

}  // namespace
}  // namespace mcx::distributed
