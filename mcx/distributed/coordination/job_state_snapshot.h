// JobStateSnapshot: one version of the job state, immutable and shared by every watcher, together with the
// history of which tasks changed in the versions before it.
//
// Watchers of an N-task job are the N tasks themselves, so sending each of them the whole state at every change
// costs N x N task entries per change. With the history, a transport sends each watcher only the tasks that
// changed since the version it last sent that watcher (changed_since), and the receiver applies them to the
// state it holds (docs/distributed.md, "Scale").
//
// The history is a chain of changes shared between consecutive snapshots (each snapshot adds one link: the
// tasks that differ from the snapshot before it). It is bounded: a link is dropped once the chain holds more
// task ids than the job has tasks or more than kMaxHistoryLinks links, since the whole state is then no larger
// than the delta; a watcher further behind gets the whole state.
//
// Thread-safety: immutable after construction; share it through std::shared_ptr<const JobStateSnapshot>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mcx/distributed/coordination/types.h"

namespace mcx::distributed {

class JobStateSnapshot {
 public:
  static constexpr int kMaxHistoryLinks = 1024;

  // The first snapshot a service publishes: no history.
  explicit JobStateSnapshot(JobState state);
  // The snapshot that follows `previous` (state.version > previous.state().version): its history is
  // previous's plus one link, the ids of the tasks whose TaskInfo differs between the two (O(N) to find).
  JobStateSnapshot(const JobStateSnapshot& previous, JobState state);

  const JobState& state() const { return state_; }
  uint64_t version() const { return state_.version; }

  // The ids (ascending, each once) of the tasks whose TaskInfo changed after `version`, or nullopt when this
  // snapshot cannot tell: `version` is 0 (the receiver has nothing yet), is newer than this snapshot, or is
  // older than the history kept. Then the receiver needs the whole state. Costs O(changes since `version`).
  std::optional<std::vector<TaskId>> changed_since(uint64_t version) const;

 private:
  // One link: the tasks that changed from version `since` to version `version`, and the link before it.
  struct Change {
    uint64_t since = 0;
    uint64_t version = 0;
    std::vector<TaskId> tasks;
    std::shared_ptr<const Change> previous;
    int links = 1;       // links in the chain ending here
    size_t task_ids = 0;  // task ids in the chain ending here
  };

  JobState state_;
  std::shared_ptr<const Change> history_;  // null: none (the first snapshot)
};

}  // namespace mcx::distributed
