#include "mcx/distributed/kv_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mcx::distributed {

KvStore::KvStore(CoordinationAgent* agent, std::string prefix, absl::Time deadline, std::vector<int> processes)
    : agent_(agent), prefix_(std::move(prefix)), deadline_(deadline), processes_(std::move(processes)) {}

std::string KvStore::full_key(const std::string& key) const {
  int rank = -1;
  if (!processes_.empty() && absl::SimpleAtoi(key, &rank) && rank >= 0 &&
      rank < static_cast<int>(processes_.size())) {
    return absl::StrCat("mcx/task/", processes_[rank], "/", prefix_, key);
  }
  return prefix_ + key;
}

absl::Duration KvStore::left() const { return std::max(absl::Milliseconds(1), deadline_ - absl::Now()); }

void KvStore::set(const std::string& key, const std::vector<char>& data) {
  const std::string k = full_key(key);
  absl::Status s = agent_->kv_set(k, std::string_view(data.data(), data.size()), /*allow_overwrite=*/true);
  if (!s.ok()) throw KvStoreError(absl::StrCat("publishing ", k, ": ", s.message()));
}

std::vector<char> KvStore::get(const std::string& key) {
  const std::string k = full_key(key);
  absl::StatusOr<std::string> v = agent_->kv_get(k, left());
  if (!v.ok()) throw KvStoreError(absl::StrCat("reading ", k, ": ", v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void KvStore::wait(const std::vector<std::string>& keys) { wait(keys, std::chrono::milliseconds(-1)); }

void KvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  absl::Time until = deadline_;
  if (timeout.count() >= 0) until = std::min(until, absl::Now() + absl::FromChrono(timeout));
  for (const std::string& key : keys) {
    const std::string k = full_key(key);
    absl::StatusOr<std::string> v = agent_->kv_get(k, std::max(absl::Milliseconds(1), until - absl::Now()));
    if (!v.ok()) throw KvStoreError(absl::StrCat("waiting for ", k, ": ", v.status().message()));
  }
}

}  // namespace mcx::distributed
