#include "mcx/distributed/data_plane/gloo/gloo_kv_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/collectives/kv_wait.h"

namespace mcx::distributed {

GlooKvStore::GlooKvStore(JobKeyValue& kv, std::string prefix, absl::Time deadline, std::vector<int> processes)
    : kv_(kv), prefix_(std::move(prefix)), deadline_(deadline), processes_(std::move(processes)) {}

std::optional<int> GlooKvStore::owner(const std::string& key) const {
  int rank = -1;
  if (!processes_.empty() && absl::SimpleAtoi(key, &rank) && rank >= 0 &&
      rank < static_cast<int>(processes_.size())) {
    return processes_[rank];
  }
  return std::nullopt;
}

std::string GlooKvStore::full_key(const std::string& key) const {
  if (std::optional<int> p = owner(key)) return task_key(*p, prefix_ + key);
  return prefix_ + key;
}

absl::StatusOr<std::string> GlooKvStore::await(const std::string& key, absl::Time until) const {
  const std::optional<int> writer = owner(key);
  return kv_get_while_writers_live(kv_, full_key(key), until, writer ? std::vector<int>{*writer} : processes_);
}

absl::Duration GlooKvStore::left() const { return std::max(absl::Milliseconds(1), deadline_ - absl::Now()); }

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  const std::string k = full_key(key);
  absl::Status s = kv_.insert(k, std::string_view(data.data(), data.size()), /*allow_overwrite=*/true).status();
  if (!s.ok()) throw GlooKvStoreError(absl::StrCat("publishing ", k, ": ", s.message()));
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  absl::StatusOr<std::string> v = await(key, absl::Now() + left());
  if (!v.ok()) throw GlooKvStoreError(absl::StrCat("reading ", full_key(key), ": ", v.status().message()));
  return std::vector<char>(v->begin(), v->end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys) { wait(keys, std::chrono::milliseconds(-1)); }

void GlooKvStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  absl::Time until = deadline_;
  if (timeout.count() >= 0) until = std::min(until, absl::Now() + absl::FromChrono(timeout));
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> v = await(key, until);
    if (!v.ok()) throw GlooKvStoreError(absl::StrCat("waiting for ", full_key(key), ": ", v.status().message()));
  }
}

}  // namespace mcx::distributed
