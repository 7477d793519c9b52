// The key-value store of the coordination service (see coordination/service.h).
#include "absl/strings/numbers.h"
#include "mcx/distributed/security/job_secret.h"
#include "mcx/distributed/security/principal.h"
#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/coordination/service_impl.h"

namespace mcx::distributed {

// --- KV ---

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
                                            const Principal* caller) {
  MCX_RETURN_IF_ERROR(check_key("kv_insert", key, options_.max_key_bytes));
  MCX_RETURN_IF_ERROR(check_writable("kv_insert", key));
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_insert] value of ", value.size(), " bytes for key '", A(key),
                                                   "' exceeds the limit of ", options_.max_value_bytes, " bytes"));
  }
  Deferred d;
  MutexLock lock(&impl_->mu);
  std::string k(key);
  auto it = impl_->kv.find(k);
  size_t old = 0;
  if (it != impl_->kv.end()) {
    if (!allow_overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat("[kv_insert] key '", A(key), "' already exists (pass allow_overwrite to replace it)"));
    }
    old = it->first.size() + it->second.size();
  }
  const std::optional<TaskId> owner = owner_of(impl_->kv_owner, k);
  const bool new_owned = it == impl_->kv.end() && caller != nullptr && caller->role == Role::kTask;
  const int64_t dbytes = static_cast<int64_t>(k.size() + value.size()) - static_cast<int64_t>(old);
  if (caller != nullptr) {
    MCX_RETURN_IF_ERROR(authorize_key(*caller, it == impl_->kv.end() ? KeyAction::kInsert : KeyAction::kOverwrite, key,
                                      owner));
    if (new_owned || (owner && *owner == caller->task)) {
      MCX_RETURN_IF_ERROR(
          check_quota("kv_insert", options_, *caller, impl_->kv_usage, new_owned ? 1 : 0, dbytes));
    }
  }
  size_t next = impl_->kv_bytes - old + k.size() + value.size();
  if (next > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("[kv_insert] the key-value store would hold ", next,
                                                     " bytes, over its limit of ", options_.max_total_bytes));
  }
  impl_->kv_bytes = next;
  if (new_owned) {
    impl_->kv_owner[k] = caller->task;
    impl_->kv_usage[caller->task].keys += 1;
    impl_->kv_usage[caller->task].bytes += dbytes;
  } else if (owner) {
    impl_->kv_usage[*owner].bytes += dbytes;
  }
  impl_->kv[k] = std::string(value);
  auto w = impl_->kv_waiters.find(k);
  if (w != impl_->kv_waiters.end()) {
    std::string v(value);
    for (auto& kw : w->second) d.add([f = std::move(kw.done), v] { f(v); });
    impl_->kv_waiters.erase(w);
  }
  return absl::OkStatus();
}

void CoordinationService::kv_get(std::string_view key, absl::Duration timeout,
                                 Callback<absl::StatusOr<std::string>> done) {
  Deferred d;
  MutexLock lock(&impl_->mu);
  if (absl::Status s = check_key("kv_get", key, options_.max_key_bytes); !s.ok()) {
    d.add([f = std::move(done), s] { f(s); });
    return;
  }
  std::string k(key);
  auto it = impl_->kv.find(k);
  if (it != impl_->kv.end()) {
    d.add([f = std::move(done), v = it->second] { f(v); });
    return;
  }
  const absl::Time deadline = impl_->clock->now() + timeout;
  impl_->kv_waiters[k].push_back({impl_->next_id++, deadline, std::move(done)});
  impl_->wake_timer_for(deadline);
}

absl::StatusOr<std::string> CoordinationService::kv_try_get(std::string_view key) {
  MCX_RETURN_IF_ERROR(check_key("kv_try_get", key, options_.max_key_bytes));
  MutexLock lock(&impl_->mu);
  auto it = impl_->kv.find(std::string(key));
  if (it == impl_->kv.end()) return absl::NotFoundError(absl::StrCat("[kv_try_get] key '", A(key), "' is not set"));
  return it->second;
}

absl::StatusOr<int64_t> CoordinationService::kv_increment(std::string_view key, int64_t delta,
                                                          const Principal* caller) {
  MCX_RETURN_IF_ERROR(check_key("kv_increment", key, options_.max_key_bytes));
  MCX_RETURN_IF_ERROR(check_writable("kv_increment", key));
  Deferred d;
  MutexLock lock(&impl_->mu);
  std::string k(key);
  auto it = impl_->kv.find(k);
  const bool new_owned = it == impl_->kv.end() && caller != nullptr && caller->role == Role::kTask;
  if (caller != nullptr) {
    MCX_RETURN_IF_ERROR(authorize_key(*caller, KeyAction::kIncrement, key, owner_of(impl_->kv_owner, k)));
    if (new_owned) MCX_RETURN_IF_ERROR(check_quota("kv_increment", options_, *caller, impl_->kv_usage, 1, 0));
  }
  int64_t value = 0;
  if (it != impl_->kv.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key),
                                                   "' holds a value that is not a decimal int64 (",
                                                   it->second.size(), " bytes)"));
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("[kv_increment] key '", A(key), "': adding ", delta,
                                                   " overflows int64"));
  }
  std::string v = absl::StrCat(value);
  if (it != impl_->kv.end()) {
    impl_->kv_bytes = impl_->kv_bytes - it->second.size() + v.size();
    if (std::optional<TaskId> owner = owner_of(impl_->kv_owner, k)) {
      impl_->kv_usage[*owner].bytes += static_cast<int64_t>(v.size()) - static_cast<int64_t>(it->second.size());
    }
    it->second = v;
  } else {
    impl_->kv_bytes += k.size() + v.size();
    impl_->kv[k] = v;
    if (new_owned) {
      impl_->kv_owner[k] = caller->task;
      impl_->kv_usage[caller->task].keys += 1;
      impl_->kv_usage[caller->task].bytes += static_cast<int64_t>(k.size() + v.size());
    }
  }
  auto w = impl_->kv_waiters.find(k);
  if (w != impl_->kv_waiters.end()) {
    for (auto& kw : w->second) d.add([f = std::move(kw.done), v] { f(v); });
    impl_->kv_waiters.erase(w);
  }
  return value;
}

std::vector<KeyValue> CoordinationService::kv_dir(std::string_view dir) {
  std::string prefix = strip_trailing_slashes(dir);
  if (!prefix.empty()) prefix += "/";
  std::vector<KeyValue> out;
  MutexLock lock(&impl_->mu);
  for (auto it = impl_->kv.lower_bound(prefix); it != impl_->kv.end() && it->first.starts_with(prefix); ++it) {
    out.push_back({it->first, it->second});
  }
  return out;
}

absl::StatusOr<size_t> CoordinationService::kv_delete(std::string_view key, const Principal* caller) {
  std::string k = strip_trailing_slashes(key);
  std::string prefix = k + "/";
  MCX_RETURN_IF_ERROR(check_writable("kv_delete", k));
  MutexLock lock(&impl_->mu);
  // The key and every key under key/: all are checked before any is deleted.
  std::vector<std::map<std::string, std::string>::iterator> doomed;
  if (auto it = impl_->kv.find(k); it != impl_->kv.end()) doomed.push_back(it);
  for (auto it = impl_->kv.lower_bound(prefix); it != impl_->kv.end() && it->first.starts_with(prefix); ++it) {
    if (!written_by_service(it->first)) doomed.push_back(it);  // a directory delete leaves the service's keys
  }
  if (caller != nullptr) {
    for (const auto& it : doomed) {
      MCX_RETURN_IF_ERROR(authorize_key(*caller, KeyAction::kDelete, it->first, owner_of(impl_->kv_owner, it->first)));
    }
  }
  for (const auto& it : doomed) {
    impl_->kv_bytes -= it->first.size() + it->second.size();
    if (std::optional<TaskId> owner = owner_of(impl_->kv_owner, it->first)) {
      KvUsage& u = impl_->kv_usage[*owner];
      u.keys -= 1;
      u.bytes -= static_cast<int64_t>(it->first.size() + it->second.size());
    }
    impl_->kv_owner.erase(it->first);
    impl_->kv.erase(it);
  }
  return doomed.size();
}

}  // namespace mcx::distributed
