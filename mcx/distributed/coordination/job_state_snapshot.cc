#include "mcx/distributed/coordination/job_state_snapshot.h"

#include <algorithm>
#include <utility>

namespace mcx::distributed {

JobStateSnapshot::JobStateSnapshot(JobState state) : state_(std::move(state)) {}

JobStateSnapshot::JobStateSnapshot(const JobStateSnapshot& previous, JobState state) : state_(std::move(state)) {
  const std::vector<TaskInfo>& before = previous.state_.tasks;
  const std::vector<TaskInfo>& after = state_.tasks;
  if (before.size() != after.size() || previous.version() >= version()) return;  // no history: whole states
  auto link = std::make_shared<Change>();
  link->since = previous.version();
  link->version = version();
  for (size_t i = 0; i < after.size(); ++i) {
    if (!(before[i] == after[i])) link->tasks.push_back(static_cast<TaskId>(i));
  }
  link->task_ids = link->tasks.size();
  const std::shared_ptr<const Change>& chain = previous.history_;
  // Past the bounds the chain starts again with this link: a watcher more than one link behind then gets the
  // whole state, which is no larger than the delta would be.
  if (chain && chain->links < kMaxHistoryLinks && chain->task_ids + link->task_ids <= after.size()) {
    link->previous = chain;
    link->links = chain->links + 1;
    link->task_ids += chain->task_ids;
  }
  history_ = std::move(link);
}

std::optional<std::vector<TaskId>> JobStateSnapshot::changed_since(uint64_t version) const {
  if (version == 0 || version > this->version()) return std::nullopt;
  std::vector<TaskId> ids;
  if (version == this->version()) return ids;
  const Change* link = history_.get();
  while (link != nullptr && link->version > version) {
    ids.insert(ids.end(), link->tasks.begin(), link->tasks.end());
    if (link->since <= version) {
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      return ids;
    }
    link = link->previous.get();
  }
  return std::nullopt;  // older than the history kept
}

}  // namespace mcx::distributed
