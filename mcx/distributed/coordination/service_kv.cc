// The coordination service's key-value store (service.h, "Key-value store").
#include "mcx/distributed/coordination/service.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/coordination/service_format.h"
#include "mcx/distributed/security/job_secret.h"
#include "mcx/distributed/security/principal.h"

namespace mcx::distributed {
namespace {

absl::Status check_key(absl::string_view api, std::string_view key, size_t max) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("[", api, "] the key is empty"));
  if (key.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", api, "] key of ", A(key).size(), " bytes exceeds the limit of ", max, " bytes"));
  }
  return absl::OkStatus();
}
// The job's secrets and the service's own keys (job_secret.h) are the service's: no caller writes them,
// trusted or not.
absl::Status check_writable(absl::string_view api, std::string_view key) {
  if (!written_by_service(key)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("[", api, "] '", A(key),
                                                  is_secret_key(key) ? "' is one of the job's secrets" : "' is the service's own",
                                                  ": written by the coordination service only"));
}
// Whether task `who` may own `dkeys` more keys and `dbytes` more bytes (the per-task quotas).
absl::Status check_quota(absl::string_view api, const ServiceOptions& o, const Principal& who,
                         const std::map<TaskId, KvUsage>& usage, int64_t dkeys,
                         int64_t dbytes) {
  auto it = usage.find(who.task);
  const int64_t keys = (it == usage.end() ? 0 : it->second.keys) + dkeys;
  const int64_t bytes = (it == usage.end() ? 0 : it->second.bytes) + dbytes;
  if (dkeys > 0 && keys > *o.max_keys_per_task) {
    return absl::ResourceExhaustedError(absl::StrCat("[", api, "] ", who.to_string(), " would own ", keys,
                                                     " keys, over its quota of ", *o.max_keys_per_task,
                                                     " (MCX_KV_MAX_KEYS_PER_TASK)"));
  }
  if (dbytes > 0 && bytes > *o.max_bytes_per_task) {
    return absl::ResourceExhaustedError(absl::StrCat("[", api, "] ", who.to_string(), " would own ", bytes,
                                                     " bytes, over its quota of ", *o.max_bytes_per_task,
                                                     " (MCX_KV_MAX_BYTES_PER_TASK)"));
  }
  return absl::OkStatus();
}
std::optional<TaskId> owner_of(const std::map<std::string, TaskId>& owners, const std::string& key) {
  auto it = owners.find(key);
  if (it == owners.end()) return std::nullopt;
  return it->second;
}

}  // namespace

absl::Status CoordinationService::kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                                            const Caller& caller) {
  metrics_.kv_operations.with({"insert"}).add();
  const Principal* who = caller.principal();  // nullptr: trusted
  MCX_RETURN_IF_ERROR(check_key("kv_insert", key, options_.max_key_bytes));
  MCX_RETURN_IF_ERROR(check_writable("kv_insert", key));
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_insert] value of ", value.size(), " bytes for key '", A(key),
                                                   "' exceeds the limit of ", options_.max_value_bytes, " bytes"));
  }
  ServiceLock lock(&mu_);
  std::string k(key);
  auto it = kv_.find(k);
  size_t old = 0;
  if (it != kv_.end()) {
    if (!allow_overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat("[kv_insert] key '", A(key), "' already exists (pass allow_overwrite to replace it)"));
    }
    old = it->first.size() + it->second.size();
  }
  const std::optional<TaskId> owner = owner_of(kv_owner_, k);
  const bool new_owned = it == kv_.end() && who != nullptr && who->role == Role::kTask;
  const int64_t dbytes = static_cast<int64_t>(k.size() + value.size()) - static_cast<int64_t>(old);
  if (who != nullptr) {
    MCX_RETURN_IF_ERROR(authorize_key(*who, it == kv_.end() ? KeyAction::kInsert : KeyAction::kOverwrite, key,
                                      owner));
    if (new_owned || (owner && *owner == who->task)) {
      MCX_RETURN_IF_ERROR(
          check_quota("kv_insert", options_, *who, kv_usage_, new_owned ? 1 : 0, dbytes));
    }
  }
  size_t next = kv_bytes_ - old + k.size() + value.size();
  if (next > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("[kv_insert] the key-value store would hold ", next,
                                                     " bytes, over its limit of ", options_.max_total_bytes));
  }
  kv_bytes_ = next;
  if (new_owned) {
    kv_owner_[k] = who->task;
    kv_usage_[who->task].keys += 1;
    kv_usage_[who->task].bytes += dbytes;
  } else if (owner) {
    kv_usage_[*owner].bytes += dbytes;
  }
  kv_[k] = std::string(value);
  auto w = kv_waiters_.find(k);
  if (w != kv_waiters_.end()) {
    std::string v(value);
    for (auto& kw : w->second) lock.defer([f = std::move(kw.done), v] { f(v); });
    kv_waiters_.erase(w);
  }
  return absl::OkStatus();
}

void CoordinationService::kv_get(std::string_view key, absl::Duration timeout,
                                 Callback<absl::StatusOr<std::string>> done) {
  metrics_.kv_operations.with({"get"}).add();
  ServiceLock lock(&mu_);
  if (absl::Status s = check_key("kv_get", key, options_.max_key_bytes); !s.ok()) {
    lock.defer([f = std::move(done), s] { f(s); });
    return;
  }
  std::string k(key);
  auto it = kv_.find(k);
  if (it != kv_.end()) {
    lock.defer([f = std::move(done), v = it->second] { f(v); });
    return;
  }
  const absl::Time deadline = clock_->now() + timeout;
  kv_waiters_[k].push_back({next_id_++, deadline, std::move(done)});
  wake_timer_for_locked(deadline);
}

absl::StatusOr<std::string> CoordinationService::kv_try_get(std::string_view key) {
  MCX_RETURN_IF_ERROR(check_key("kv_try_get", key, options_.max_key_bytes));
  MutexLock lock(&mu_);
  auto it = kv_.find(std::string(key));
  if (it == kv_.end()) return absl::NotFoundError(absl::StrCat("[kv_try_get] key '", A(key), "' is not set"));
  return it->second;
}

absl::StatusOr<int64_t> CoordinationService::kv_increment(std::string_view key, int64_t delta,
                                                          const Caller& caller) {
  metrics_.kv_operations.with({"increment"}).add();
  const Principal* who = caller.principal();  // nullptr: trusted
  MCX_RETURN_IF_ERROR(check_key("kv_increment", key, options_.max_key_bytes));
  MCX_RETURN_IF_ERROR(check_writable("kv_increment", key));
  ServiceLock lock(&mu_);
  std::string k(key);
  auto it = kv_.find(k);
  const bool new_owned = it == kv_.end() && who != nullptr && who->role == Role::kTask;
  if (who != nullptr) {
    MCX_RETURN_IF_ERROR(authorize_key(*who, KeyAction::kIncrement, key, owner_of(kv_owner_, k)));
    if (new_owned) MCX_RETURN_IF_ERROR(check_quota("kv_increment", options_, *who, kv_usage_, 1, 0));
  }
  int64_t value = 0;
  if (it != kv_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key),
                                                   "' holds a value that is not a decimal int64 (",
                                                   it->second.size(), " bytes)"));
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key), "': adding ", delta,
                                                   " overflows int64"));
  }
  std::string v = absl::StrCat(value);
  if (it != kv_.end()) {
    kv_bytes_ = kv_bytes_ - it->second.size() + v.size();
    if (std::optional<TaskId> owner = owner_of(kv_owner_, k)) {
      kv_usage_[*owner].bytes += static_cast<int64_t>(v.size()) - static_cast<int64_t>(it->second.size());
    }
    it->second = v;
  } else {
    kv_bytes_ += k.size() + v.size();
    kv_[k] = v;
    if (new_owned) {
      kv_owner_[k] = who->task;
      kv_usage_[who->task].keys += 1;
      kv_usage_[who->task].bytes += static_cast<int64_t>(k.size() + v.size());
    }
  }
  auto w = kv_waiters_.find(k);
  if (w != kv_waiters_.end()) {
    for (auto& kw : w->second) lock.defer([f = std::move(kw.done), v] { f(v); });
    kv_waiters_.erase(w);
  }
  return value;
}

std::vector<KeyValue> CoordinationService::kv_dir(std::string_view dir) {
  metrics_.kv_operations.with({"dir"}).add();
  std::string prefix = strip_trailing_slashes(dir);
  if (!prefix.empty()) prefix += "/";
  std::vector<KeyValue> out;
  MutexLock lock(&mu_);
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) {
    out.push_back({it->first, it->second});
  }
  return out;
}

absl::StatusOr<size_t> CoordinationService::kv_delete(std::string_view key, const Caller& caller) {
  metrics_.kv_operations.with({"delete"}).add();
  const Principal* who = caller.principal();  // nullptr: trusted
  std::string k = strip_trailing_slashes(key);
  std::string prefix = k + "/";
  MCX_RETURN_IF_ERROR(check_writable("kv_delete", k));
  MutexLock lock(&mu_);
  // The key and every key under key/: all are checked before any is deleted.
  std::vector<std::map<std::string, std::string>::iterator> doomed;
  if (auto it = kv_.find(k); it != kv_.end()) doomed.push_back(it);
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) {
    if (!written_by_service(it->first)) doomed.push_back(it);  // a directory delete leaves the service's keys
  }
  if (who != nullptr) {
    for (const auto& it : doomed) {
      MCX_RETURN_IF_ERROR(authorize_key(*who, KeyAction::kDelete, it->first, owner_of(kv_owner_, it->first)));
    }
  }
  for (const auto& it : doomed) {
    kv_bytes_ -= it->first.size() + it->second.size();
    if (std::optional<TaskId> owner = owner_of(kv_owner_, it->first)) {
      KvUsage& u = kv_usage_[*owner];
      u.keys -= 1;
      u.bytes -= static_cast<int64_t>(it->first.size() + it->second.size());
    }
    kv_owner_.erase(it->first);
    kv_.erase(it);
  }
  return doomed.size();
}

// Ends the blocking gets past their deadline.
void CoordinationService::expire_kv_gets_locked(absl::Time now, ServiceLock& lock) {
  for (auto it = kv_waiters_.begin(); it != kv_waiters_.end();) {
    auto& ws = it->second;
    for (auto w = ws.begin(); w != ws.end();) {
      if (w->deadline <= now) {
        absl::Status st = absl::DeadlineExceededError(
            absl::StrCat("[kv_get] key '", it->first, "' was not set within the timeout"));
        auto f = std::move(w->done);
        lock.defer([f = std::move(f), st] { f(st); });
        w = ws.erase(w);
      } else {
        ++w;
      }
    }
    if (ws.empty()) {
      it = kv_waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace mcx::distributed
