// The agent options the in-process tests use for task `task` of an n-task job: quick heartbeats (every 100 ms),
// a 5 s registration deadline and the given heartbeat timeout. Tests set what else they need (on_failure, ...).
#pragma once

#include "absl/time/time.h"
#include "mcx/distributed/coordination/agent.h"

namespace mcx::distributed {

inline AgentOptions test_agent_options(TaskId task, int n, absl::Duration heartbeat_timeout) {
  AgentOptions ao;
  ao.task_id = task;
  ao.num_tasks = n;
  ao.init_timeout = absl::Seconds(5);
  ao.heartbeat_interval = absl::Milliseconds(100);
  ao.heartbeat_timeout = heartbeat_timeout;
  return ao;
}

}  // namespace mcx::distributed
