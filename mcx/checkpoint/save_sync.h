// The cross-process steps of one save, over the coordination service (docs/checkpoint.md, "Commit
// protocol"). In a process that did not call distributed::initialize(), or in a one-process job, every step is
// local and nothing blocks.
//
//   share_from_leader: process 0 publishes a value or its error under <prefix>/<name>; the others wait for it
//                      (kv_get with the timeout).
//   all_ok:            every process publishes its outcome, then a barrier (with the timeout); the result is the
//                      first failure of any process ("process 2: ..."), identical on every process.
//
// Errors: the leader's or another process's error (its code kept, message prefixed with the process), or
// DeadlineExceeded / the barrier's error when a process does not arrive in time.
// Thread-safety: one SaveSync per save, used by one thread (the caller's or the background writer's).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx::distributed {
class CoordinationAgent;
}

namespace mcx::checkpoint {

class SaveSync {
 public:
  // prefix: a KV directory unique to this save on every process (e.g. "mcx/checkpoint/<root tag>/<seq>").
  SaveSync(std::string prefix, absl::Duration timeout);

  bool is_leader() const { return process_ == 0; }
  int process() const { return process_; }
  int process_count() const { return count_; }

  absl::StatusOr<std::string> share_from_leader(const std::string& name, const absl::StatusOr<std::string>& value);
  absl::Status all_ok(const std::string& name, const absl::Status& mine);
  // Leader: removes the KV entries under another save's prefix (best effort).
  void forget(const std::string& prefix);

 private:
  std::string prefix_;
  absl::Duration timeout_;
  distributed::CoordinationAgent* agent_ = nullptr;  // null: one process
  int process_ = 0;
  int count_ = 1;
};

}  // namespace mcx::checkpoint
