#include "mcx/collectives/kv_wait.h"

#include <algorithm>

#include "mcx/collectives/live_set.h"

namespace mcx {

absl::StatusOr<std::string> kv_get_while_writers_live(JobKeyValue& kv, const std::string& key, absl::Time until,
                                                       const std::vector<int>& writers) {
  constexpr absl::Duration kSlice = absl::Milliseconds(200);
  for (;;) {
    const absl::Duration left = std::max(absl::Milliseconds(1), until - absl::Now());
    absl::StatusOr<std::string> v = kv.get(key, std::min(left, kSlice));
    if (v.ok() || v.status().code() != absl::StatusCode::kDeadlineExceeded || left <= kSlice) return v;
    if (absl::Status dead = reported_process_failure(writers); !dead.ok()) return dead;
  }
}

}  // namespace mcx
