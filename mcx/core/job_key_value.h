// The job's key-value store (the coordination service) as the layers below distributed see it: distributed
// installs an implementation when initialize() succeeds and removes it at shutdown(), so that, e.g., the code
// generator can share compiled kernels between the processes of a job without depending on the distributed
// layer (the registry pattern of topology.h and collectives/peer_group.h; docs/architecture.md).
//
// Thread-safety: the registry functions are thread-safe; implementations are thread-safe. Every call that
// may block takes a timeout.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx {

class JobKeyValue {
 public:
  virtual ~JobKeyValue() = default;
  virtual int process_index() const = 0;
  virtual int process_count() const = 0;
  // Writes value under key: the service's KV insert (the one name of the write in every layer). Without
  // allow_overwrite it creates key unless it exists: true when this call created it, false when it existed already
  // (or is another writer's under identity binding). With allow_overwrite it writes and returns true; keys under
  // this process's prefix (task_key(process_index(), ...)) are always its own. Errors: the service's
  // (Unavailable, ResourceExhausted, PermissionDenied when overwriting another writer's key, ...), or
  // FailedPrecondition after shutdown.
  virtual absl::StatusOr<bool> insert(std::string_view key, std::string_view value, bool allow_overwrite) = 0;
  // The value of key, waiting up to timeout for it to appear: DeadlineExceeded (or NotFound) when it does not.
  virtual absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout) = 0;
};

// The keys that belong to one process: "mcx/task/<process>/<suffix>" (an empty suffix: the prefix itself, with
// its slash). Under identity binding only that process's task may write there, except its inbox (suffix
// "inbox/..."), which every task may write to wake it (distributed/security/principal.h). Every layer spells these
// keys through task_key.
std::string task_key(int process, std::string_view suffix);
// The process whose prefix holds `key` ("mcx/task/<decimal id>", then "/" or the end), or nullopt.
std::optional<int> task_of_key(std::string_view key);

// Installs (or, with nullptr, removes) the job's store.
void set_job_key_value(std::shared_ptr<JobKeyValue> store);
// The installed store, or nullptr outside a multi-process job.
std::shared_ptr<JobKeyValue> job_key_value();

}  // namespace mcx
