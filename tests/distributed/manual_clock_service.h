// A coordination service for unit tests: on a ManualClock and without its timer thread, so a test advances time
// and calls check_timeouts() itself, and every timeout and latency is exact.
#pragma once

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/distributed/coordination/service.h"
#include "tests/distributed/callback_result.h"

namespace mcx::distributed {

// The options of such a service of n tasks with a 10 s heartbeat timeout; a test sets the rest it needs.
inline ServiceOptions manual_clock_options(ManualClock* clock, int n, bool recoverable) {
  ServiceOptions o;
  o.num_tasks = n;
  o.clock = clock;
  o.start_timer_thread = false;
  o.recoverable = recoverable;
  o.heartbeat_timeout = absl::Seconds(10);
  return o;
}

// The service, or null with a test failure naming why it could not be created.
inline std::unique_ptr<CoordinationService> make_service(const ServiceOptions& o) {
  auto s = CoordinationService::create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Registers tasks 0..n-1 with incarnations 100 + i; every registration completes, with the service's incarnation.
inline void register_all(CoordinationService& s, int n) {
  std::vector<Result<absl::StatusOr<RegisterResult>>> rs(n);
  for (int i = 0; i < n; ++i) s.register_task(i, 100 + i, n, absl::Seconds(5), rs[i].cb());
  for (int i = 0; i < n; ++i) {
    auto r = rs[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->service_incarnation, s.service_incarnation());
  }
}

}  // namespace mcx::distributed
