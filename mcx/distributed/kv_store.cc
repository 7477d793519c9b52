#include "mcx/distributed/kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mcx::distributed {

KvStore::KvStore(CoordinationAgent* agent, std::string prefix, absl::Time deadline)
    : agent_(agent), prefix_(std::move(prefix)), deadline_(deadline) {}

absl::Duration KvStore::left() const { return std::max(absl::Milliseconds(1), deadline_ - absl::Now()); }

void KvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = agent_->kv_set(prefix_ + key, std::string_view(data.data(), data.size()), /*allow_overwrite=*/true);
  if (!s.ok()) throw KvStoreError(absl::StrCat("publishing ", prefix_, key, ": ", s.message()));
}

std::vector<char> KvStore::get(const std::string& key) {
  absl::StatusOr<std::string> v = agent_->kv_get(prefix_ + key, left());
  if (!v.ok()) throw KvStoreError(absl::StrCat("reading ", prefix_, key, ": ", v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void KvStore::wait(const std::vector<std::string>& keys) { wait(keys, std::chrono::milliseconds(-1)); }

void KvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  absl::Time until = deadline_;
  if (timeout.count() >= 0) until = std::min(until, absl::Now() + absl::FromChrono(timeout));
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> v =
        agent_->kv_get(prefix_ + key, std::max(absl::Milliseconds(1), until - absl::Now()));
    if (!v.ok()) throw KvStoreError(absl::StrCat("waiting for ", prefix_, key, ": ", v.status().message()));
  }
}

}  // namespace mcx::distributed
