// The cross-process steps of one save, over the coordination service (docs/checkpoint.md, "Commit
// protocol"). In a process that did not call distributed::initialize(), or in a one-process job, every step is
// local and nothing blocks.
//
// The participants are the listed processes (every process of the job when the list is empty); the leader is
// the lowest of them.
//
//   share_from_leader: the leader publishes a value or its error under <prefix>/<name>; the others wait for it
//                      (kv_get with the timeout; a leader the coordination service declares dead ends the
//                      wait at once, a ProcessFailure naming it).
//   all_ok:            every participant publishes its outcome, then a barrier over the participants (with the
//                      timeout); the result is the first failure of any ("process 2: ..."), identical on each.
//
// Errors: the leader's or another process's error (its code kept, message prefixed with the process), or
// DeadlineExceeded / the barrier's error when a process does not arrive in time.
// Thread-safety: one SaveSync per save, used by one thread (the caller's or the background writer's).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx::distributed {
class CoordinationAgent;
}

namespace mcx::checkpoint {

class SaveSync {
 public:
  // prefix: a KV directory unique to this save on every participant (e.g. "mcx/checkpoint/<root tag>/<seq>").
  // processes: the participants, ascending, this process among them (checked by the manager); empty: all.
  SaveSync(std::string prefix, absl::Duration timeout, const std::vector<int>& processes = {});

  bool is_leader() const { return process_ == participants_.front(); }
  int leader() const { return participants_.front(); }
  int process() const { return process_; }
  const std::vector<int>& participants() const { return participants_; }

  absl::StatusOr<std::string> share_from_leader(const std::string& name, const absl::StatusOr<std::string>& value);
  absl::Status all_ok(const std::string& name, const absl::Status& mine);
  // Removes the KV entries this process wrote under another save's prefix (best effort): its all_ok
  // outcomes of `names`, and on the leader its shared values of `leader_names`. Each process removes only its
  // own entries, as the coordination service's key rules require under identity binding (docs/security.md).
  void forget(const std::string& prefix, const std::vector<std::string>& names,
              const std::vector<std::string>& leader_names);

 private:
  std::string prefix_;
  absl::Duration timeout_;
  distributed::CoordinationAgent* agent_ = nullptr;  // null: one process
  int process_ = 0;
  std::vector<int> participants_ = {0};
};

}  // namespace mcx::checkpoint
