#include "mcx/distributed/security/rate_limiter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mcx::distributed {

PeerRateLimiter::PeerRateLimiter(int64_t per_second, std::function<absl::Time()> now)
    : per_second_(per_second), now_(now ? std::move(now) : [] { return absl::Now(); }) {}

absl::Status PeerRateLimiter::admit(std::string_view peer) {
  if (per_second_ <= 0) return absl::OkStatus();
  const absl::Time now = now_();
  const double capacity = static_cast<double>(per_second_);
  MutexLock lock(&mu_);
  auto it = buckets_.find(absl::string_view(peer.data(), peer.size()));
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxPeers) drop_idle_locked(now);
    it = buckets_.emplace(std::string(peer), Bucket{capacity, now}).first;
  }
  Bucket& b = it->second;
  b.tokens = std::min(capacity, b.tokens + absl::ToDoubleSeconds(now - b.at) * capacity);
  b.at = now;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return absl::OkStatus();
  }
  ++refused_;
  return absl::ResourceExhaustedError(absl::StrCat("[rate limit] ", std::string(peer), " made more than ",
                                                   per_second_,
                                                   " requests/s (MCX_COORDINATOR_RATE_LIMIT); slow down"));
}

int64_t PeerRateLimiter::refused() const {
  MutexLock lock(&mu_);
  return refused_;
}

size_t PeerRateLimiter::tracked_peers() const {
  MutexLock lock(&mu_);
  return buckets_.size();
}

void PeerRateLimiter::drop_idle_locked(absl::Time now) {
  const double capacity = static_cast<double>(per_second_);
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const double tokens = it->second.tokens + absl::ToDoubleSeconds(now - it->second.at) * capacity;
    if (tokens >= capacity) {
      buckets_.erase(it++);
    } else {
      ++it;
    }
  }
  // Everyone is busy: forget the whole table rather than grow without bound (a flood of fresh addresses).
  if (buckets_.size() >= kMaxPeers) buckets_.clear();
}

}  // namespace mcx::distributed
