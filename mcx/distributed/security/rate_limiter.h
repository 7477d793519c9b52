// PeerRateLimiter: a token bucket per caller, so one peer that floods the coordination service (authenticated or
// not) is refused quickly instead of queueing ahead of the job's heartbeats and barriers.
//
// Each peer (its principal, "task/1", or without identity binding its address) may make `per_second` requests
// per second on average and `per_second` at once (one second's worth of burst). A refused request is
// RESOURCE_EXHAUSTED "[rate limit] <peer> made more than <n> requests/s (MCX_COORDINATOR_RATE_LIMIT); slow down".
// per_second 0: no limit. At most kMaxPeers buckets are kept; full (idle) ones are dropped first.
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/core/mutex.h"

namespace mcx::distributed {

class PeerRateLimiter {
 public:
  static constexpr size_t kMaxPeers = 4096;
  // `now` (tests) defaults to absl::Now.
  explicit PeerRateLimiter(int64_t per_second, std::function<absl::Time()> now = nullptr);

  absl::Status admit(std::string_view peer);
  int64_t refused() const;
  size_t tracked_peers() const;  // buckets kept (at most kMaxPeers)

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time at;
  };
  void drop_idle_locked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const int64_t per_second_;
  const std::function<absl::Time()> now_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mcx::distributed
