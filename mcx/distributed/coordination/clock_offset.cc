#include "mcx/distributed/coordination/clock_offset.h"

#include <algorithm>

#include "mcx/core/profiler.h"

namespace mcx::distributed {

void ClockOffsetEstimate::add(int64_t sent_us, int64_t service_us, int64_t received_us) {
  if (received_us < sent_us) return;
  // offset = service - midpoint, the midpoint rounded down; the error covers the rounding.
  const int64_t midpoint = sent_us + (received_us - sent_us) / 2;
  window_.push_back({service_us - midpoint, std::max<int64_t>(1, (received_us - sent_us + 1) / 2)});
  if (window_.size() > kWindow) window_.pop_front();
  const Sample best = estimate();
  profiler::set_reference_clock(best.offset_us, best.error_us);
}

ClockOffsetEstimate::Sample ClockOffsetEstimate::estimate() const {
  if (window_.empty()) return {0, -1};
  return *std::min_element(window_.begin(), window_.end(),
                           [](const Sample& a, const Sample& b) { return a.error_us < b.error_us; });
}

}  // namespace mcx::distributed
