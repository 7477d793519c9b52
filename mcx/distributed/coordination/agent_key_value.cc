#include "mcx/distributed/coordination/agent_key_value.h"

#include <mutex>

namespace mcx::distributed {
namespace {

absl::Status closed() {
  return absl::FailedPreconditionError("[job_key_value] the distributed runtime was shut down");
}

}  // namespace

absl::StatusOr<bool> AgentKeyValue::insert(std::string_view key, std::string_view value, bool allow_overwrite) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (agent_ == nullptr) return closed();
  absl::Status s = agent_->kv_insert(key, value, allow_overwrite);
  if (s.ok()) return true;
  // Creating: an existing key (or, under identity binding, another writer's job-wide key) is not ours.
  if (!allow_overwrite && (absl::IsAlreadyExists(s) || absl::IsPermissionDenied(s))) return false;
  return s;
}

absl::StatusOr<std::string> AgentKeyValue::get(std::string_view key, absl::Duration timeout) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (agent_ == nullptr) return closed();
  return agent_->kv_get(key, timeout);
}

void AgentKeyValue::close() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  agent_ = nullptr;
}

}  // namespace mcx::distributed
