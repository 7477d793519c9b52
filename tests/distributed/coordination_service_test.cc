// The coordination service state machine, driven directly and through the in-process client, with a
// ManualClock so timeouts are exact and tests are fast.
#include <chrono>
#include "mcx/distributed/coordination/service.h"
#include "tests/distributed/manual_clock_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/security/job_secret.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

class ServiceTest : public ::testing::Test {
 protected:
  std::unique_ptr<CoordinationService> make(int n, bool recoverable = false,
                                            absl::Duration shutdown_timeout = absl::Seconds(5)) {
    ServiceOptions o = manual_clock_options(&clock_, n, recoverable);
    o.shutdown_timeout = shutdown_timeout;
    o.max_key_bytes = 16;
    o.max_value_bytes = 64;
    o.max_total_bytes = 200;
    return make_service(o);
  }
  ManualClock clock_;
};

TEST_F(ServiceTest, RegisterWaitsForAllThenTimesOutNamingMissing) {
  auto s = make(4);
  Result<absl::StatusOr<RegisterResult>> r0, r2;
  s->register_task(0, 100, 4, absl::Seconds(3), r0.cb());
  s->register_task(2, 102, 4, absl::Seconds(30), r2.cb());
  EXPECT_FALSE(r0.ready());
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  EXPECT_FALSE(r0.ready());
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  auto e = r0.get();
  ASSERT_EQ(e.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(e.status().message(), HasSubstr("2 of 4 registered; missing task ids: 1, 3"));
  EXPECT_FALSE(r2.ready());
  Result<absl::StatusOr<RegisterResult>> r1, r3;
  s->register_task(1, 101, 4, absl::Seconds(3), r1.cb());
  s->register_task(3, 103, 4, absl::Seconds(3), r3.cb());
  EXPECT_TRUE(r1.get().ok());
  EXPECT_TRUE(r2.get().ok());
  EXPECT_TRUE(r3.get().ok());
}

TEST_F(ServiceTest, SlowRegistrationIsNotAHeartbeatFailure) {
  auto s = make(2);
  Result<absl::StatusOr<RegisterResult>> r0, r1;
  s->register_task(0, 100, 2, absl::Seconds(60), r0.cb());
  clock_.advance(absl::Seconds(15));  // longer than the 10 s heartbeat timeout
  s->check_timeouts();
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kConnected);
  s->register_task(1, 101, 2, absl::Seconds(60), r1.cb());
  EXPECT_TRUE(r0.get().ok());
  clock_.advance(absl::Seconds(9));
  s->check_timeouts();
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kConnected);  // its clock started at completion
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kError);
}

TEST_F(ServiceTest, RegisterErrors) {
  auto s = make(2);
  Result<absl::StatusOr<RegisterResult>> bad_id, bad_n, zero;
  s->register_task(2, 7, 2, absl::Seconds(1), bad_id.cb());
  EXPECT_EQ(bad_id.get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_id.get().status().message(), HasSubstr("task id 2 is outside [0, 2)"));
  s->register_task(1, 7, 3, absl::Seconds(1), bad_n.cb());
  EXPECT_EQ(bad_n.get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_n.get().status().message(), HasSubstr("says the job has 3 processes but the coordination service "
                                                         "was started for 2"));
  s->register_task(0, 0, 2, absl::Seconds(1), zero.cb());
  EXPECT_EQ(zero.get().status().code(), absl::StatusCode::kInvalidArgument);

  // Duplicate id (another incarnation) in fate-sharing mode: refused, and the job fails.
  Result<absl::StatusOr<RegisterResult>> first, dup, retry;
  s->register_task(0, 100, 2, absl::Seconds(5), first.cb());
  s->register_task(0, 100, 2, absl::Seconds(5), retry.cb());  // same incarnation: a retry, fine
  EXPECT_FALSE(retry.ready());
  s->register_task(0, 555, 2, absl::Seconds(5), dup.cb());
  EXPECT_EQ(dup.get().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(dup.get().status().message(), HasSubstr("already registered by another process"));
  EXPECT_EQ(first.get().status().code(), absl::StatusCode::kAborted);
  JobState js = s->job_state();
  EXPECT_FALSE(js.job_error.ok());
  EXPECT_THAT(js.job_error.message(), HasSubstr("task 0 failed"));
  EXPECT_EQ(js.tasks[0].state, TaskState::kError);
}

TEST_F(ServiceTest, StaleIncarnationAndUnknownTaskHeartbeat) {
  auto s = make(2);
  register_all(*s, 2);
  EXPECT_TRUE(s->heartbeat(0, 100).ok());
  absl::Status st = s->heartbeat(0, 999);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("stale incarnation for task 0"));
  EXPECT_EQ(s->heartbeat(5, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, KeyValueOperations) {
  auto s = make(1);
  ASSERT_TRUE(s->kv_insert("a/x", "1", false, Caller::trusted()).ok());
  EXPECT_EQ(s->kv_insert("a/x", "2", false, Caller::trusted()).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(s->kv_insert("a/x", std::string("b\0y", 3), true, Caller::trusted()).ok());  // bytes, overwrite
  EXPECT_EQ(*s->kv_try_get("a/x"), std::string("b\0y", 3));
  EXPECT_EQ(s->kv_try_get("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s->kv_insert("a/y/z", "3", false, Caller::trusted()).ok());
  ASSERT_TRUE(s->kv_insert("ab", "4", false, Caller::trusted()).ok());
  ASSERT_TRUE(s->kv_insert("a", "5", false, Caller::trusted()).ok());
  std::vector<KeyValue> dir = s->kv_dir("a");
  ASSERT_EQ(dir.size(), 2u);  // "a/x", "a/y/z"; not "a" itself nor "ab"
  EXPECT_EQ(dir[0].key, "a/x");
  EXPECT_EQ(dir[1].key, "a/y/z");
  EXPECT_EQ(s->kv_dir("a/").size(), 2u);
  EXPECT_EQ(s->kv_dir("a/y").size(), 1u);
  // Increment.
  EXPECT_EQ(*s->kv_increment("cnt", 5, Caller::trusted()), 5);
  EXPECT_EQ(*s->kv_increment("cnt", -7, Caller::trusted()), -2);
  EXPECT_EQ(*s->kv_try_get("cnt"), "-2");
  EXPECT_EQ(s->kv_increment("ab", 1, Caller::trusted()).value(), 5);
  ASSERT_TRUE(s->kv_insert("ab", "x", true, Caller::trusted()).ok());
  EXPECT_EQ(s->kv_increment("ab", 1, Caller::trusted()).status().code(), absl::StatusCode::kInvalidArgument);
  // Recursive delete: "a" and "a/..." but not "ab".
  EXPECT_EQ(*s->kv_delete("a", Caller::trusted()), 3u);
  EXPECT_TRUE(s->kv_dir("a").empty());
  EXPECT_TRUE(s->kv_try_get("ab").ok());
  EXPECT_EQ(*s->kv_delete("missing", Caller::trusted()), 0u);
  // Limits.
  absl::Status big_key = s->kv_insert(std::string(17, 'k'), "v", false, Caller::trusted());
  EXPECT_EQ(big_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big_key.message(), HasSubstr("key of 17 bytes exceeds the limit of 16 bytes"));
  absl::Status big_val = s->kv_insert("k", std::string(65, 'v'), false, Caller::trusted());
  EXPECT_EQ(big_val.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big_val.message(), HasSubstr("value of 65 bytes"));
  EXPECT_EQ(s->kv_insert("", "v", false, Caller::trusted()).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->kv_insert("f" + std::to_string(i), std::string(60, 'v'), false, Caller::trusted()).ok());
  EXPECT_EQ(s->kv_insert("f9", std::string(60, 'v'), false, Caller::trusted()).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s->status().kv_keys, 5u);  // ab, cnt, f0..f2
}

TEST_F(ServiceTest, BlockingGetWakesOnInsertOrTimesOut) {
  auto s = make(1);
  Result<absl::StatusOr<std::string>> g1, g2;
  s->kv_get("k", absl::Seconds(5), g1.cb());
  s->kv_get("other", absl::Seconds(2), g2.cb());
  EXPECT_FALSE(g1.ready());
  ASSERT_TRUE(s->kv_insert("k", "v", false, Caller::trusted()).ok());
  EXPECT_EQ(*g1.get(), "v");
  clock_.advance(absl::Seconds(3));
  s->check_timeouts();
  EXPECT_EQ(g2.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(g2.get().status().message(), HasSubstr("key 'other' was not set"));
  Result<absl::StatusOr<std::string>> g3;
  s->kv_get("k", absl::Seconds(1), g3.cb());  // present: at once
  EXPECT_EQ(*g3.get(), "v");
}

TEST_F(ServiceTest, BarrierReuseSubsetAndSameOutcome) {
  auto s = make(3);
  register_all(*s, 3);
  for (int64_t round = 0; round < 3; ++round) {
    std::vector<Result<absl::Status>> r(3);
    for (int i = 0; i < 3; ++i) {
      if (i == 2) {
        for (int j = 0; j < 2; ++j) EXPECT_FALSE(r[j].ready()) << "round " << round;
      }
      s->barrier(i, 100 + i, "b", round, {}, absl::Seconds(5), r[i].cb());
    }
    for (auto& x : r) EXPECT_TRUE(x.get().ok());
  }
  // Subset {0, 2}: task 1 not needed.
  Result<absl::Status> a, b;
  s->barrier(0, 100, "sub", 0, {2, 0}, absl::Seconds(5), a.cb());
  s->barrier(2, 102, "sub", 0, {0, 2}, absl::Seconds(5), b.cb());
  EXPECT_TRUE(a.get().ok());
  EXPECT_TRUE(b.get().ok());
  // A late call to a finished instance gets the stored result.
  Result<absl::Status> late;
  s->barrier(1, 101, "b", 2, {}, absl::Seconds(5), late.cb());
  EXPECT_TRUE(late.get().ok());
  // Stale counter.
  Result<absl::Status> stale;
  s->barrier(1, 101, "b", 0, {}, absl::Seconds(5), stale.cb());
  EXPECT_EQ(stale.get().code(), absl::StatusCode::kFailedPrecondition);
}

// Registration and a barrier of every task cost the service linear work in the number of tasks: 16,384 tasks
// register and pass a barrier in well under a second (each arrival once resolved and compared the full task set,
// N log N per arrival, and registration scanned the tasks per registration: 5.0 s here, now 0.1 s).
// The scale tests' bound: 16,384 tasks' worth of work since `start` in under 3 s (30 s under the sanitizers); the
// quadratic versions took 5 to 13 s.
void expect_linear_time_since(std::chrono::steady_clock::time_point start) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#if defined(MCX_SANITIZER_BUILD)
  EXPECT_LT(seconds, 30.0);
#else
  EXPECT_LT(seconds, 3.0);
#endif
}

TEST_F(ServiceTest, RegistrationAndBarriersOfManyTasksStayLinear) {
  constexpr int kTasks = 16384;
  auto s = make(kTasks);
  const auto start = std::chrono::steady_clock::now();
  register_all(*s, kTasks);
  for (int64_t round = 0; round < 2; ++round) {
    std::vector<Result<absl::Status>> r(kTasks);
    for (int i = 0; i < kTasks; ++i) s->barrier(i, 100 + i, "all", round, {}, absl::Seconds(5), r[i].cb());
    for (auto& x : r) ASSERT_TRUE(x.get().ok());
  }
  // An explicit list naming every task is the same participant set as the empty one.
  std::vector<TaskId> everyone(kTasks);
  for (int i = 0; i < kTasks; ++i) everyone[i] = i;
  std::vector<Result<absl::Status>> r(kTasks);
  for (int i = 0; i < kTasks; ++i) s->barrier(i, 100 + i, "all", 2, i == 0 ? everyone : std::vector<TaskId>{}, absl::Seconds(5), r[i].cb());
  for (auto& x : r) ASSERT_TRUE(x.get().ok());
  expect_linear_time_since(start);
}

TEST_F(ServiceTest, LiveSetAgreementOfManyTasksStaysLinear) {
  // 16,384 tasks, 1% of them failed, every survivor asks for the live set: an arrival must not scan the set
  // (a scan per arrival took 13 s here), and the survivors share one answer.
  constexpr int kTasks = 16384;
  auto s = make(kTasks, /*recoverable=*/true);
  register_all(*s, kTasks);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 99; i < kTasks; i += 100) s->fail_task(i, absl::UnavailableError("killed"));
  const int failed = kTasks / 100;
  // Each answer is checked where it arrives (keeping 16,000 copies of 16,000 tasks would take 12 GB).
  std::atomic<int> answered{0}, wrong{0};
  std::atomic<uint64_t> generation{0};
  for (int i = 0; i < kTasks; ++i) {
    if (i % 100 == 99) continue;
    s->get_live_tasks(i, 100 + i, LiveSetRequest{}, absl::Seconds(5), [&](const absl::StatusOr<LiveTasks>& live) {
      uint64_t none = 0;
      if (live.ok()) generation.compare_exchange_strong(none, live->generation);
      if (!live.ok() || live->tasks.size() != static_cast<size_t>(kTasks - failed) || live->generation != generation) {
        ++wrong;
      }
      ++answered;
    });
  }
  EXPECT_EQ(answered.load(), kTasks - failed);  // all answered when the last survivor called
  EXPECT_EQ(wrong.load(), 0);
  expect_linear_time_since(start);
}

TEST_F(ServiceTest, BarrierTimeoutNamesMissingAndIsFixedByFirstArrival) {
  auto s = make(4);
  register_all(*s, 4);
  Result<absl::Status> r0, r2;
  s->barrier(0, 100, "t", 0, {}, absl::Seconds(2), r0.cb());
  clock_.advance(absl::Seconds(1));
  s->barrier(2, 102, "t", 0, {}, absl::Seconds(100), r2.cb());  // its longer timeout does not extend it
  clock_.advance(absl::Milliseconds(1500));
  s->check_timeouts();
  absl::Status e0 = r0.get(), e2 = r2.get();
  EXPECT_EQ(e0, e2);  // same outcome for all
  EXPECT_EQ(e0.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(e0.message(), HasSubstr("barrier 't' (instance 0) timed out after 2s: 2 of 4 tasks arrived"));
  EXPECT_THAT(e0.message(), HasSubstr("missing: task 1 (connected, last heartbeat 2.5s ago), task 3"));
  // A late arrival sees the same failure.
  Result<absl::Status> r1;
  s->barrier(1, 101, "t", 0, {}, absl::Seconds(2), r1.cb());
  EXPECT_EQ(r1.get(), e0);
  // Status shows no barrier in flight now; a new one shows who is missing.
  Result<absl::Status> n0;
  s->barrier(3, 103, "t", 1, {}, absl::Seconds(2), n0.cb());
  ServiceStatus st = s->status();
  ASSERT_EQ(st.barriers.size(), 1u);
  EXPECT_EQ(st.barriers[0].arrived, std::vector<TaskId>({3}));
  EXPECT_EQ(st.barriers[0].missing, std::vector<TaskId>({0, 1, 2}));
}

TEST_F(ServiceTest, BarrierMismatchedSetsAndOutsidersFailForAll) {
  auto s = make(3);
  register_all(*s, 3);
  Result<absl::Status> a, b;
  s->barrier(0, 100, "m", 0, {0, 1}, absl::Seconds(5), a.cb());
  s->barrier(1, 101, "m", 0, {0, 1, 2}, absl::Seconds(5), b.cb());
  EXPECT_EQ(a.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_THAT(a.get().message(), HasSubstr("named participants {0, 1, 2} but the first arrival named {0, 1}"));
  Result<absl::Status> c, d;
  s->barrier(0, 100, "o", 0, {0, 1}, absl::Seconds(5), c.cb());
  s->barrier(2, 102, "o", 0, {0, 1}, absl::Seconds(5), d.cb());
  EXPECT_EQ(c.get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.get().message(), HasSubstr("task 2 is not one of its participants"));
}

TEST_F(ServiceTest, BarrierCancel) {
  auto s = make(2);
  register_all(*s, 2);
  Result<absl::Status> a;
  s->barrier(0, 100, "c", 0, {}, absl::Seconds(5), a.cb());
  ASSERT_TRUE(s->cancel_barrier("c", 0, Caller::trusted()).ok());
  EXPECT_EQ(a.get().code(), absl::StatusCode::kCancelled);
  Result<absl::Status> b;
  s->barrier(1, 101, "c", 0, {}, absl::Seconds(5), b.cb());
  EXPECT_EQ(b.get().code(), absl::StatusCode::kCancelled);
  // Cancel a future instance; then cancel of a passed instance fails.
  ASSERT_TRUE(s->cancel_barrier("c", 1, Caller::trusted()).ok());
  Result<absl::Status> f;
  s->barrier(0, 100, "c", 1, {}, absl::Seconds(5), f.cb());
  EXPECT_EQ(f.get().code(), absl::StatusCode::kCancelled);
  Result<absl::Status> p0, p1;
  s->barrier(0, 100, "c", 2, {}, absl::Seconds(5), p0.cb());
  s->barrier(1, 101, "c", 2, {}, absl::Seconds(5), p1.cb());
  EXPECT_TRUE(p0.get().ok());
  EXPECT_EQ(s->cancel_barrier("c", 2, Caller::trusted()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ServiceTest, HeartbeatTimeoutFailsTaskAndPropagates) {
  auto s = make(3);
  register_all(*s, 3);
  Result<absl::Status> b0;
  s->barrier(0, 100, "x", 0, {}, absl::Seconds(60), b0.cb());
  clock_.advance(absl::Seconds(6));
  EXPECT_TRUE(s->heartbeat(0, 100).ok());
  EXPECT_TRUE(s->heartbeat(2, 102).ok());
  clock_.advance(absl::Seconds(5));  // task 1 silent for 11 s > 10 s
  s->check_timeouts();
  JobState js = s->job_state();
  EXPECT_EQ(js.tasks[1].state, TaskState::kError);
  EXPECT_EQ(js.tasks[0].state, TaskState::kConnected);
  EXPECT_EQ(js.tasks[1].error.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(js.tasks[1].error.message(), HasSubstr("task 1 stopped sending heartbeats (last one 11s ago"));
  EXPECT_THAT(js.job_error.message(), HasSubstr("task 1 failed: task 1 stopped sending heartbeats"));
  EXPECT_EQ(b0.get().code(), absl::StatusCode::kAborted);  // pending barrier fails at once
  EXPECT_THAT(b0.get().message(), HasSubstr("task 1 failed"));
  EXPECT_EQ(s->heartbeat(0, 100).code(), absl::StatusCode::kAborted);
}

TEST_F(ServiceTest, ChangesInADeliveryBatchReachEachWatcherOnce) {
  auto s = make(6, /*recoverable=*/true);
  register_all(*s, 6);
  std::vector<std::shared_ptr<const JobStateSnapshot>> seen;
  Mutex mu;
  auto obs = s->watch(-1, 0, [&](const std::shared_ptr<const JobStateSnapshot>& js) {
    MutexLock l(&mu);
    seen.push_back(js);
  });
  ASSERT_TRUE(obs.ok());
  auto count = [&] {
    MutexLock l(&mu);
    return seen.size();
  };
  ASSERT_EQ(count(), 1u);  // the state at subscription
  // Outside a batch each change is delivered before the call returns.
  s->fail_task(1, absl::UnavailableError("killed"));
  EXPECT_EQ(count(), 2u);
  {
    CoordinationService::DeliveryBatch batch(s.get());
    s->fail_task(2, absl::UnavailableError("killed"));
    {
      CoordinationService::DeliveryBatch inner(s.get());  // nested: the outer batch delivers
      s->fail_task(4, absl::UnavailableError("killed"));
    }
    s->fail_task(5, absl::UnavailableError("killed"));
    EXPECT_EQ(count(), 2u);
  }
  ASSERT_EQ(count(), 3u);
  MutexLock l(&mu);
  const JobState& last = seen.back()->state();
  EXPECT_EQ(last.version, s->job_state().version);
  for (TaskId id : {1, 2, 4, 5}) EXPECT_EQ(last.tasks[id].state, TaskState::kError) << id;
  // The delivered snapshot tells what changed since the one before: the three tasks of the batch.
  EXPECT_THAT(seen.back()->changed_since(seen[1]->version()), ::testing::Optional(::testing::ElementsAre(2, 4, 5)));
}

TEST_F(ServiceTest, ConnectionLossFailsTaskAtOnceButShutdownDoesNot) {
  auto s = make(2, /*recoverable=*/false, /*shutdown_timeout=*/absl::ZeroDuration());
  register_all(*s, 2);
  std::vector<JobState> seen;
  Mutex mu;
  auto obs = s->watch(-1, 0, [&](const std::shared_ptr<const JobStateSnapshot>& js) {
    MutexLock l(&mu);
    seen.push_back(js->state());
  });
  ASSERT_TRUE(obs.ok());
  auto w0 = s->watch(0, 100, [](const std::shared_ptr<const JobStateSnapshot>&) {});
  auto w1 = s->watch(1, 101, [](const std::shared_ptr<const JobStateSnapshot>&) {});
  ASSERT_TRUE(w0.ok() && w1.ok());
  EXPECT_TRUE(s->status().tasks[1].watching);
  // Task 0 shuts down cleanly: its stream ending is not a failure.
  Result<absl::Status> sd;
  s->shutdown_task(0, 100, sd.cb());
  EXPECT_TRUE(sd.get().ok());
  s->end_watch(*w0, /*connection_lost=*/true);
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kShutdown);
  EXPECT_TRUE(s->job_state().job_error.ok());
  // Task 1's connection breaks.
  s->end_watch(*w1, true);
  JobState js = s->job_state();
  EXPECT_EQ(js.tasks[1].state, TaskState::kError);
  EXPECT_THAT(js.tasks[1].error.message(), HasSubstr("connection to task 1 lost"));
  MutexLock l(&mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().version, js.version);
  EXPECT_EQ(seen.back().tasks[1].state, TaskState::kError);
}

TEST_F(ServiceTest, ShutdownBarrierWaitsForAllAndNamesMissing) {
  auto s = make(3, false, absl::Seconds(4));
  register_all(*s, 3);
  Result<absl::Status> a, b;
  s->shutdown_task(0, 100, a.cb());
  s->shutdown_task(1, 101, b.cb());
  EXPECT_FALSE(a.ready());
  clock_.advance(absl::Seconds(3));
  EXPECT_TRUE(s->heartbeat(2, 102).ok());
  clock_.advance(absl::Seconds(2));
  s->check_timeouts();
  EXPECT_EQ(a.get().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a.get().message(), HasSubstr("shutdown barrier failed"));
  EXPECT_THAT(a.get().message(), HasSubstr("missing: task 2"));
  EXPECT_EQ(s->job_state().tasks[0].state, TaskState::kShutdown);
}

TEST_F(ServiceTest, LiveTasksAgreementNeverWaitsOnDeadTasks) {
  auto s = make(4, /*recoverable=*/true);
  register_all(*s, 4);
  s->fail_task(3, absl::UnavailableError("killed"));
  Result<absl::StatusOr<LiveTasks>> r0, r1;
  s->get_live_tasks(0, 100, {}, absl::Seconds(5), r0.cb());
  s->get_live_tasks(1, 101, {}, absl::Seconds(5), r1.cb());
  EXPECT_FALSE(r0.ready());  // task 2 is live and has not called
  s->fail_task(2, absl::UnavailableError("killed too"));  // re-evaluated: 0 and 1 are all that is live
  LiveTasks expect{{0, 1}, {100, 101}, {"", ""}, 1};  // the first agreement over all tasks
  EXPECT_EQ(*r0.get(), expect);
  EXPECT_EQ(*r1.get(), expect);
  // Subset and timeout naming the live task that did not call.
  Result<absl::StatusOr<LiveTasks>> t0;
  s->get_live_tasks(0, 100, {{0, 1, 3}}, absl::Seconds(2), t0.cb());
  clock_.advance(absl::Seconds(3));
  s->check_timeouts();
  EXPECT_EQ(t0.get().status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(t0.get().status().message(), HasSubstr("live tasks {1} of {0, 1, 3}"));
}

// The service says which failure mode it runs in, so a process that asked for a recoverable job learns at
// initialize() whether its coordinator runs one; nobody else may write that key.
TEST_F(ServiceTest, PublishesItsFailureModeUnderAKeyOnlyItWrites) {
  EXPECT_EQ(*make(1)->kv_try_get(std::string(kServiceModeKey)), "fate-sharing");
  auto s = make(1, /*recoverable=*/true);
  EXPECT_EQ(*s->kv_try_get(std::string(kServiceModeKey)), "recoverable");
  EXPECT_EQ(s->kv_insert(std::string(kServiceModeKey), "fate-sharing", true, Caller::trusted()).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(s->kv_delete("mcx", Caller::trusted()).ok());  // a directory delete leaves it
  EXPECT_EQ(*s->kv_try_get(std::string(kServiceModeKey)), "recoverable");
  EXPECT_EQ(s->status().kv_keys, 0u);  // not one of the job's keys
}

TEST_F(ServiceTest, RecoverableBarrierNeverWaitsForADeadTask) {
  auto s = make(3, /*recoverable=*/true);
  register_all(*s, 3);
  // A participant dies while the others wait: they fail at once (not at the 60 s deadline), naming it.
  Result<absl::Status> a0, a1;
  s->barrier(0, 100, "written", 0, {}, absl::Seconds(60), a0.cb());
  s->barrier(1, 101, "written", 0, {}, absl::Seconds(60), a1.cb());
  EXPECT_FALSE(a0.ready());
  s->fail_task(2, absl::UnavailableError("connection lost"));
  ASSERT_TRUE(a0.ready());
  EXPECT_EQ(a0.get().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(a0.get().message(), HasSubstr("task 2 has failed: connection lost"));
  EXPECT_EQ(a1.get(), a0.get());
  EXPECT_TRUE(s->job_state().job_error.ok());  // the job goes on
  // A new barrier over the dead task fails on its first arrival; one over the survivors passes.
  Result<absl::Status> b0, c0, c1;
  s->barrier(0, 100, "next", 0, {0, 1, 2}, absl::Seconds(60), b0.cb());
  ASSERT_TRUE(b0.ready());
  EXPECT_EQ(b0.get().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(b0.get().message(), HasSubstr("barrier 'next' cannot pass: task 2 has failed"));
  s->barrier(0, 100, "survivors", 0, {0, 1}, absl::Seconds(60), c0.cb());
  s->barrier(1, 101, "survivors", 0, {0, 1}, absl::Seconds(60), c1.cb());
  EXPECT_TRUE(c0.get().ok());
  EXPECT_TRUE(c1.get().ok());
  // Once the task registered again (a restart), barriers over it wait for it as for any live task.
  Result<absl::Status> d0, d2;
  Result<absl::StatusOr<RegisterResult>> again;
  s->register_task(2, 777, 3, absl::Seconds(1), again.cb());
  ASSERT_TRUE(again.get().ok());
  s->barrier(0, 100, "back", 0, {0, 2}, absl::Seconds(60), d0.cb());
  EXPECT_FALSE(d0.ready());
  s->barrier(2, 777, "back", 0, {0, 2}, absl::Seconds(60), d2.cb());
  EXPECT_TRUE(d0.get().ok());
  EXPECT_TRUE(d2.get().ok());
}

// With restarts expected (mcx-run --max-restarts), a failed task leaves the barrier and its next incarnation
// arrives in its place: the others wait for it until the deadline instead of failing.
TEST_F(ServiceTest, ABarrierWaitsForARestartedTaskWhenRestartsAreExpected) {
  ServiceOptions o;
  o.num_tasks = 2;
  o.clock = &clock_;
  o.start_timer_thread = false;
  o.recoverable = true;
  o.failed_tasks_restart = true;
  auto s = std::move(*CoordinationService::create(o));
  register_all(*s, 2);
  Result<absl::Status> a0, a1, again;
  s->barrier(1, 101, "done", 0, {}, absl::Seconds(60), a1.cb());
  s->barrier(0, 100, "done", 0, {}, absl::Seconds(60), a0.cb());  // both arrived: passes
  EXPECT_TRUE(a0.get().ok());
  Result<absl::Status> b0, b1;
  s->barrier(0, 100, "next", 0, {}, absl::Seconds(60), b0.cb());
  s->fail_task(1, absl::UnavailableError("exited 7"));
  EXPECT_FALSE(b0.ready());  // waits for the restart
  Result<absl::StatusOr<RegisterResult>> back;
  s->register_task(1, 777, 2, absl::Seconds(1), back.cb());
  ASSERT_TRUE(back.get().ok());
  s->barrier(1, 777, "next", 0, {}, absl::Seconds(60), b1.cb());
  EXPECT_TRUE(b0.get().ok());
  EXPECT_TRUE(b1.get().ok());
}

TEST_F(ServiceTest, RecoverableRestartReRegistersWithNewIncarnation) {
  auto s = make(2, /*recoverable=*/true);
  register_all(*s, 2);
  s->fail_task(1, absl::UnavailableError("connection lost"));
  EXPECT_TRUE(s->job_state().job_error.ok());  // not fate-shared
  EXPECT_EQ(s->heartbeat(0, 100).code(), absl::StatusCode::kOk);
  Result<absl::StatusOr<RegisterResult>> same, fresh;
  s->register_task(1, 101, 2, absl::Seconds(1), same.cb());
  EXPECT_EQ(same.get().status().code(), absl::StatusCode::kFailedPrecondition);
  s->register_task(1, 777, 2, absl::Seconds(1), fresh.cb());
  ASSERT_TRUE(fresh.get().ok());  // everyone registered once already: no wait
  JobState js = s->job_state();
  EXPECT_EQ(js.tasks[1].state, TaskState::kConnected);
  EXPECT_EQ(js.tasks[1].incarnation, 777u);
  EXPECT_EQ(s->heartbeat(1, 101).code(), absl::StatusCode::kFailedPrecondition);  // the old one is stale
  Result<absl::StatusOr<LiveTasks>> a, b;
  s->get_live_tasks(0, 100, {}, absl::Seconds(1), a.cb());
  s->get_live_tasks(1, 777, {}, absl::Seconds(1), b.cb());
  EXPECT_EQ(*a.get(), (LiveTasks{{0, 1}, {100, 777}, {"", ""}, 1}));
  EXPECT_EQ(*b.get(), *a.get());
  // The next agreement over the same members keeps the generation, the same for every caller.
  Result<absl::StatusOr<LiveTasks>> c, d;
  s->get_live_tasks(1, 777, {}, absl::Seconds(1), c.cb());
  s->get_live_tasks(0, 100, {}, absl::Seconds(1), d.cb());
  EXPECT_EQ(c.get()->generation, 1u);
  EXPECT_EQ(*c.get(), *d.get());
  // Task 1 restarts again: the same ids with another incarnation are a new live set.
  s->fail_task(1, absl::UnavailableError("killed again"));
  Result<absl::StatusOr<RegisterResult>> again;
  s->register_task(1, 888, 2, absl::Seconds(1), again.cb());
  ASSERT_TRUE(again.get().ok());
  Result<absl::StatusOr<LiveTasks>> e, f;
  s->get_live_tasks(0, 100, {}, absl::Seconds(1), e.cb());
  s->get_live_tasks(1, 888, {}, absl::Seconds(1), f.cb());
  EXPECT_EQ(*e.get(), (LiveTasks{{0, 1}, {100, 888}, {"", ""}, 2}));
  EXPECT_EQ(*f.get(), *e.get());
}

TEST_F(ServiceTest, NamedLiveSetAgreementsAreIndependentAndCarryPayloads) {
  auto s = make(3, /*recoverable=*/true);
  register_all(*s, 3);
  // Task 0 waits in agreement "a"; tasks 1 and 2 call "b": they must not meet task 0's call.
  Result<absl::StatusOr<LiveTasks>> a0, b1, b2, a1, a2;
  s->get_live_tasks(0, 100, LiveSetRequest{{}, "a", "zero"}, absl::Seconds(5), a0.cb());
  s->get_live_tasks(1, 101, LiveSetRequest{{1, 2}, "b", "one"}, absl::Seconds(5), b1.cb());
  EXPECT_FALSE(b1.ready());
  s->get_live_tasks(2, 102, LiveSetRequest{{1, 2}, "b", "two"}, absl::Seconds(5), b2.cb());
  ASSERT_TRUE(b1.get().ok());
  EXPECT_EQ(b1.get()->tasks, (std::vector<TaskId>{1, 2}));
  EXPECT_EQ(b1.get()->payloads, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(*b2.get(), *b1.get());
  EXPECT_FALSE(a0.ready());
  // A dead member is not waited for, and its payload is absent; the survivors' payloads are in task order.
  s->get_live_tasks(2, 102, LiveSetRequest{{}, "a", "two"}, absl::Seconds(5), a2.cb());
  s->fail_task(1, absl::UnavailableError("killed"));
  ASSERT_TRUE(a0.get().ok());
  EXPECT_EQ(a0.get()->tasks, (std::vector<TaskId>{0, 2}));
  EXPECT_EQ(a0.get()->payloads, (std::vector<std::string>{"zero", "two"}));
  EXPECT_EQ(*a2.get(), *a0.get());
  // Generations are job-wide: "b" got 1, "a" (other members) got 2.
  EXPECT_EQ(b1.get()->generation, 1u);
  EXPECT_EQ(a0.get()->generation, 2u);
  // An oversized payload is refused for its caller alone, naming both sizes.
  s->get_live_tasks(0, 100, LiveSetRequest{{}, "a", std::string(s->options().max_value_bytes + 1, 'x')},
                    absl::Seconds(5), a1.cb());
  EXPECT_EQ(a1.get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a1.get().status().message(), HasSubstr("the limit is"));
}

TEST_F(ServiceTest, AProcessGoneDuringRegistrationFailsTheJobAtOnce) {
  auto s = make(3);
  Result<absl::StatusOr<RegisterResult>> r0, r1;
  s->register_task(0, 100, 3, absl::Seconds(60), r0.cb());
  s->register_task(1, 101, 3, absl::Seconds(60), r1.cb());
  s->registration_abandoned(1, 999);  // another incarnation: nothing happens
  EXPECT_FALSE(r0.ready());
  s->registration_abandoned(1, 101);  // its registration call was cancelled: the process is gone
  ASSERT_TRUE(r0.ready());            // at once, not at the 60 s registration deadline
  EXPECT_EQ(r0.get().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(r0.get().status().message(), HasSubstr("task 1 went away while waiting for the other tasks to register"));
  EXPECT_EQ(s->job_state().tasks[1].state, TaskState::kError);
}

TEST_F(ServiceTest, AProcessGoneDuringRegistrationIsOnlyFailedInARecoverableJob) {
  auto s = make(3, /*recoverable=*/true);
  Result<absl::StatusOr<RegisterResult>> r0, r1, r2;
  s->register_task(0, 100, 3, absl::Seconds(60), r0.cb());
  s->register_task(1, 101, 3, absl::Seconds(60), r1.cb());
  s->registration_abandoned(1, 101);
  EXPECT_FALSE(r0.ready());  // task 2 has not registered yet
  EXPECT_EQ(s->job_state().tasks[1].state, TaskState::kError);
  s->register_task(2, 102, 3, absl::Seconds(60), r2.cb());
  ASSERT_TRUE(r0.ready());
  EXPECT_TRUE(r0.get().ok());
  EXPECT_TRUE(r2.get().ok());
  // Once answered, a cancellation changes nothing.
  s->registration_abandoned(2, 102);
  EXPECT_EQ(s->job_state().tasks[2].state, TaskState::kConnected);
}

TEST_F(ServiceTest, FateSharingRefusesRestart) {
  auto s = make(2);
  register_all(*s, 2);
  s->fail_task(1, absl::UnavailableError("connection lost"));
  Result<absl::StatusOr<RegisterResult>> r;
  s->register_task(1, 999, 2, absl::Seconds(1), r.cb());
  EXPECT_EQ(r.get().status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(r.get().status().message(), HasSubstr("the job has failed: task 1 failed: connection lost"));
}

TEST_F(ServiceTest, ReportErrorPropagates) {
  auto s = make(2);
  register_all(*s, 2);
  ASSERT_TRUE(s->report_error(0, 100, absl::InternalError("out of memory")).ok());
  JobState js = s->job_state();
  EXPECT_THAT(js.job_error.message(), HasSubstr("task 0 failed: reported an error: out of memory"));
  EXPECT_EQ(js.job_error.code(), absl::StatusCode::kInternal);
}

TEST_F(ServiceTest, StatusSnapshot) {
  auto s = make(2);
  register_all(*s, 2);
  clock_.advance(absl::Seconds(3));
  ASSERT_TRUE(s->heartbeat(1, 101).ok());
  ASSERT_TRUE(s->kv_insert("k", "vv", false, Caller::trusted()).ok());
  ServiceStatus st = s->status();
  EXPECT_EQ(st.num_tasks, 2);
  ASSERT_EQ(st.tasks.size(), 2u);
  EXPECT_EQ(st.tasks[0].info.incarnation, 100u);
  EXPECT_EQ(*st.tasks[0].last_heartbeat_age, absl::Seconds(3));
  EXPECT_EQ(*st.tasks[1].last_heartbeat_age, absl::ZeroDuration());
  EXPECT_EQ(st.kv_keys, 1u);
  EXPECT_EQ(st.kv_bytes, 3u);
}

// The in-process client + real timer thread (system clock): blocking calls and their deadlines.
TEST(InProcessClientTest, BlockingCallsAndStreamLoss) {
  ServiceOptions o;
  o.num_tasks = 2;
  o.shutdown_timeout = absl::ZeroDuration();
  auto s = *CoordinationService::create(o);
  InProcessClient c(s.get());
  std::thread t1([&] { EXPECT_TRUE(c.register_task(1, 11, 2, absl::Seconds(5)).ok()); });
  ASSERT_TRUE(c.register_task(0, 10, 2, absl::Seconds(5)).ok());
  t1.join();
  absl::Time start = absl::Now();
  auto g = c.kv_get("never", absl::Milliseconds(200));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  auto stream = c.watch(1, 11, absl::Seconds(1));
  ASSERT_TRUE(stream.ok());
  auto first = (*stream)->next(absl::Seconds(1));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*stream)->next(absl::Milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  c.simulate_connection_loss();
  EXPECT_EQ(s->job_state().tasks[1].state, TaskState::kError);
  EXPECT_EQ((*stream)->next(absl::Seconds(1)).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mcx::distributed
