#include "mcx/distributed/coordination/service_metrics.h"

namespace mcx::distributed {

ServiceMetrics::ServiceMetrics(metrics::Registry& r)
    : registrations(r.counter("mcx_coordinator_registrations_total",
                              "tasks registered (register: a task joining; rejoin: a task returning to a restarted "
                              "coordinator)",
                              {"kind"})),
      heartbeats(r.counter("mcx_coordinator_heartbeats_total", "heartbeats received").with({})),
      heartbeats_missed(r.counter("mcx_coordinator_heartbeat_timeouts_total",
                                  "tasks declared failed because their heartbeats stopped for the heartbeat timeout")
                            .with({})),
      task_failures(r.counter("mcx_coordinator_task_failures_total",
                              "tasks declared failed, for any reason (heartbeat_timeouts_total counts those whose "
                              "heartbeats stopped)")
                        .with({})),
      barriers(r.counter("mcx_coordinator_barriers_total",
                         "barrier instances finished, by result (ok, or the error's status code)", {"result"})),
      barrier_seconds(r.histogram("mcx_coordinator_barrier_seconds",
                                  "time from a barrier's first arrival to its result", {},
                                  metrics::latency_buckets_seconds())
                          .with({})),
      live_set_agreements(
          r.counter("mcx_coordinator_live_set_agreements_total", "live-set agreements completed").with({})),
      live_set_seconds(r.histogram("mcx_coordinator_live_set_agreement_seconds",
                                   "time from a live-set agreement's first call to its answer", {},
                                   metrics::latency_buckets_seconds())
                           .with({})),
      kv_operations(r.counter("mcx_coordinator_kv_operations_total", "key-value operations served, by operation",
                              {"op"})),
      job_failures(r.counter("mcx_coordinator_job_failures_total",
                             "times the job failed as a whole (fate-sharing after a task failed, or ended by an admin)")
                       .with({})) {}

}  // namespace mcx::distributed
