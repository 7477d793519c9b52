// The coordination service's metrics (core/metrics.h), served by mcx-coordinator --metrics-address in the
// Prometheus text format; docs/profiling.md lists them with a sample. The service updates them where the
// events happen (under its lock: every update is an atomic add or one histogram lock); what is a state, not an
// event (tasks by state, KV size), is read at scrape time from the service's status.
// Thread-safety: as core/metrics.h.
#pragma once

#include "mcx/core/metrics.h"

namespace mcx::distributed {

struct ServiceMetrics {
  explicit ServiceMetrics(metrics::Registry& r);

  metrics::Family<metrics::Counter>& registrations;  // {kind: register, rejoin}
  metrics::Counter& heartbeats;
  metrics::Counter& heartbeats_missed;  // tasks failed because their heartbeats stopped
  metrics::Counter& task_failures;                   // tasks declared failed, for any reason
  metrics::Family<metrics::Counter>& barriers;       // {result: the status code's name, "ok" when passed}
  metrics::Histogram& barrier_seconds;               // first arrival to the result
  metrics::Counter& live_set_agreements;
  metrics::Histogram& live_set_seconds;              // first call to the agreement
  metrics::Family<metrics::Counter>& kv_operations;  // {op: insert, get, increment, dir, delete}
  metrics::Counter& job_failures;                    // the job failed (fate-sharing, or an admin ended it)
};

}  // namespace mcx::distributed
