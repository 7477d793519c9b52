// GlooKvStore: Gloo's rendezvous Store (gloo::rendezvous::Store) over the job's key-value store
// (core/job_key_value.h: the coordination service's), so that the data plane's rendezvous needs no second server (docs/architecture.md, "Data plane").
//
// Every key is prefixed (per group and generation, chosen by the caller) so rebuilt groups never read a
// previous generation's addresses. Given the group's processes (by rank), the key Gloo names after a rank ("0",
// "1", ...: each rank's addresses) lives under that process's own prefix, "mcx/task/<process>/<prefix><rank>",
// which only that task may write under identity binding (security/principal.h); other keys stay at <prefix><key>.
// set() writes (a restarted process overwrites its own); get() and wait() block until the key exists or the store's deadline passes, or until the process that should write it (any of the group's
// for a key of no rank) is reported failed (collectives/kv_wait.h), so a rendezvous never waits out its deadline for a
// dead process. Gloo calls these from inside connectFullMesh, which has no Status
// channel: failures throw GlooKvStoreError (a std::runtime_error) that the caller catches at the Gloo boundary.
// Thread-safety: as the store (thread-safe).
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/job_key_value.h"

namespace mcx::distributed {

class GlooKvStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GlooKvStore final : public gloo::rendezvous::Store {
 public:
  // kv must outlive the store; deadline bounds every blocking call; processes: see above (empty: no mapping).
  GlooKvStore(JobKeyValue& kv, std::string prefix, absl::Time deadline, std::vector<int> processes = {});

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  absl::Duration left() const;
  // The process that writes `key` (a rank's key), if any.
  std::optional<int> owner(const std::string& key) const;
  std::string full_key(const std::string& key) const;
  // The value of `key` once written; DeadlineExceeded at `until`; the reported failure of its writer.
  absl::StatusOr<std::string> await(const std::string& key, absl::Time until) const;
  JobKeyValue& kv_;
  std::string prefix_;
  absl::Time deadline_;
  std::vector<int> processes_;
};

}  // namespace mcx::distributed
