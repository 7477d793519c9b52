// The coordination service's per-peer rate limit (rate_limiter.h) on a fake clock, and the per-task key-value
// quotas (coordination/service.h) under identity binding.
#include "mcx/distributed/security/rate_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/security/principal.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

TEST(PeerRateLimiter, EachPeerGetsItsRateAndABurstOfOneSecond) {
  absl::Time now = absl::FromUnixSeconds(1000);
  PeerRateLimiter limiter(10, [&] { return now; });
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(limiter.admit("task/1").ok()) << i;  // the burst
  absl::Status refused = limiter.admit("task/1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("task/1 made more than 10 requests/s (MCX_COORDINATOR_RATE_LIMIT)"));
  EXPECT_TRUE(limiter.admit("task/2").ok());  // another peer has its own bucket
  now += absl::Milliseconds(100);             // refills one token per 1/10 s
  EXPECT_TRUE(limiter.admit("task/1").ok());
  EXPECT_FALSE(limiter.admit("task/1").ok());
  now += absl::Hours(1);  // never more than the burst
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(limiter.admit("task/1").ok()) << i;
  EXPECT_FALSE(limiter.admit("task/1").ok());
  EXPECT_EQ(limiter.refused(), 3);
}

TEST(PeerRateLimiter, ZeroIsNoLimitAndTheTableStaysBounded) {
  PeerRateLimiter none(0);
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(none.admit("flood").ok());
  absl::Time now = absl::FromUnixSeconds(1000);
  PeerRateLimiter limiter(5, [&] { return now; });
  for (size_t i = 0; i < 3 * PeerRateLimiter::kMaxPeers; ++i) {
    ASSERT_TRUE(limiter.admit("addr " + std::to_string(i)).ok());  // a fresh peer always has its burst
    ASSERT_LE(limiter.tracked_peers(), PeerRateLimiter::kMaxPeers) << i;
  }
  EXPECT_TRUE(limiter.admit("addr 0").ok());
}

Principal task(TaskId id) { return principal_from_uri_sans({"spiffe://mcx/job/task/" + std::to_string(id)}, ""); }

TEST(KvQuotas, ATaskMayOwnSoManyKeysAndBytes) {
  ServiceOptions o;
  o.num_tasks = 2;
  o.max_keys_per_task = 3;
  o.max_bytes_per_task = 100;
  auto s = *CoordinationService::create(o);
  const Principal t0 = task(0), t1 = task(1);
  ASSERT_TRUE(s->kv_insert("a", "1", false, t0).ok());
  ASSERT_TRUE(s->kv_insert("b", "1", false, t0).ok());
  ASSERT_TRUE(s->kv_increment("c", 1, t0).ok());  // counters a task creates count too
  absl::Status keys = s->kv_insert("d", "1", false, t0);
  EXPECT_EQ(keys.code(), absl::StatusCode::kResourceExhausted) << keys;
  EXPECT_THAT(keys.message(), HasSubstr("task/0 would own 4 keys, over its quota of 3 (MCX_KV_MAX_KEYS_PER_TASK)"));
  EXPECT_TRUE(s->kv_insert("d", "1", false, t1).ok());  // another task has its own quota
  // Bytes: overwriting one's own key with a larger value counts the difference.
  absl::Status bytes = s->kv_insert("a", std::string(99, 'x'), true, t0);
  EXPECT_EQ(bytes.code(), absl::StatusCode::kResourceExhausted) << bytes;
  EXPECT_THAT(bytes.message(), HasSubstr("over its quota of 100 (MCX_KV_MAX_BYTES_PER_TASK)"));
  EXPECT_EQ(*s->kv_try_get("a"), "1");  // nothing lost
  ASSERT_TRUE(s->kv_insert("a", std::string(90, 'x'), true, t0).ok());
  // Deleting frees the quota.
  ASSERT_EQ(*s->kv_delete("a", t0), 1u);
  EXPECT_TRUE(s->kv_insert("e", std::string(50, 'y'), false, t0).ok());
  // Trusted (in-process) writers own nothing and have no quota.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->kv_insert("trusted/" + std::to_string(i), "v", false, Caller::trusted()).ok());
}

}  // namespace
}  // namespace mcx::distributed
