// The coordination agent as the job's key-value store for the layers below (core/job_key_value.h).
// initialize() installs one; shutdown() closes it before the agent goes: a call after close() (or racing it)
// is FailedPrecondition, never a use of a destroyed agent. Thread-safe.
#pragma once

#include <memory>
#include <shared_mutex>

#include "mcx/core/job_key_value.h"
#include "mcx/distributed/coordination/agent.h"

namespace mcx::distributed {

class AgentKeyValue final : public JobKeyValue {
 public:
  AgentKeyValue(CoordinationAgent* agent, int process_index, int process_count)
      : agent_(agent), process_index_(process_index), process_count_(process_count) {}

  int process_index() const override { return process_index_; }
  int process_count() const override { return process_count_; }
  absl::StatusOr<bool> insert(std::string_view key, std::string_view value, bool allow_overwrite) override;
  absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout) override;

  // Waits for calls in progress (each bounded by its timeout), then refuses new ones.
  void close();

 private:
  mutable std::shared_mutex mu_;
  CoordinationAgent* agent_;  // guarded by mu_ (null after close)
  const int process_index_;
  const int process_count_;
};

}  // namespace mcx::distributed
