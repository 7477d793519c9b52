#include "mcx/runtime/communicator_cache.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"
#include "mcx/collectives/live_set.h"
#include "mcx/collectives/local_communicator.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/collectives/spanning_group.h"

namespace mcx {
namespace {

struct Entry {
  Mutex mu;  // serialises building and replacing this entry's group (not the whole cache)
  std::unique_ptr<LocalGroup> local ABSL_GUARDED_BY(mu);        // all members in this process (lives until exit)
  std::shared_ptr<SpanningGroup> spanning ABSL_GUARDED_BY(mu);  // the current group, when it spans processes
  uint64_t live_set ABSL_GUARDED_BY(mu) = 0;      // the live set `spanning` was built under
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;    // rebuilds under that live set
  uint64_t changes_seen ABSL_GUARDED_BY(mu) = 0;  // live_set_changes() when `spanning` was last checked
};

struct Cache {
  Mutex mu;
  std::map<std::vector<int>, std::unique_ptr<Entry>> entries ABSL_GUARDED_BY(mu);
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: streams use groups until exit
  return *c;
}

Entry& entry_for(const std::vector<int>& key) {
  Cache& c = cache();
  MutexLock lock(&c.mu);
  std::unique_ptr<Entry>& e = c.entries[key];
  if (!e) e = std::make_unique<Entry>();
  return *e;
}

absl::StatusOr<std::shared_ptr<SpanningGroup>> build_spanning(std::span<const Device> group,
                                                              const std::vector<int>& processes, uint64_t live_set,
                                                              uint64_t generation, absl::Time deadline) {
  std::vector<SpanningMember> members;
  std::vector<int> ids;
  for (const Device& d : group) {
    members.push_back(SpanningMember{d.process_index, d.is_addressable(), d.to_string()});
    ids.push_back(d.global_id);
  }
  PeerGroupRequest request{processes, absl::StrCat("devices ", absl::StrJoin(ids, ",")), generation, deadline,
                           live_set};
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<PeerGroup> peers, make_peer_group(request));
  MCX_ASSIGN_OR_RETURN(bool deterministic, kDeterministicReductionsFlag.get());
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<SpanningGroup> built,
                       SpanningGroup::create(std::move(members), std::move(peers), SpanningGroupOptions{deterministic}));
  return std::shared_ptr<SpanningGroup>(std::move(built));
}

// A group that includes a process outside the live set would wait for a process the job agreed is gone:
// refuse it, marked as that process's failure (the caller rebuilds its mesh over mcx::live_devices).
absl::Status check_in_live_set(std::span<const Device> group, const std::vector<int>& processes,
                               const LiveSet& live) {
  for (int p : processes) {
    if (!live.excludes(p)) continue;
    std::vector<int> ids;
    for (const Device& d : group) ids.push_back(d.global_id);
    return mark_process_failure(
        absl::FailedPreconditionError(absl::StrCat(
            "[collective] the group of devices {", absl::StrJoin(ids, ","), "} includes process ", p,
            ", which is not in the live set ", live.to_string(), "; build the mesh over mcx::live_devices")),
        p);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Communicator>> group_communicator(std::span<const Device> group, const Device& member,
                                                                 absl::Time deadline) {
  std::vector<int> key;
  std::vector<int> processes;
  int rank = -1;
  bool spans = false;
  for (const Device& d : group) {
    if (d == member) rank = static_cast<int>(key.size());
    key.push_back(d.global_id);
    processes.push_back(d.process_index);
    spans = spans || !d.is_addressable();
  }
  if (rank < 0) {
    return absl::InternalError(absl::StrCat("[collective] ", member.to_string(), " is not in its group"));
  }
  Entry& e = entry_for(key);
  MutexLock lock(&e.mu);
  if (!spans) {
    if (!e.local) {
      std::vector<std::string> names;
      for (const Device& d : group) names.push_back(d.to_string());
      e.local = std::make_unique<LocalGroup>(static_cast<int>(key.size()), std::move(names));
    }
    return std::shared_ptr<Communicator>(std::shared_ptr<void>(), &e.local->member(rank));  // lives until exit
  }
  // Fast path of every collective: a healthy group, and no agreement recorded since it was checked.
  const uint64_t changes = live_set_changes();
  if (e.spanning && e.changes_seen == changes && !e.spanning->failed()) {
    return std::shared_ptr<Communicator>(e.spanning, &e.spanning->member(rank));
  }
  std::sort(processes.begin(), processes.end());
  processes.erase(std::unique(processes.begin(), processes.end()), processes.end());
  const std::optional<LiveSet> live = live_set_for(processes);
  if (live) MCX_RETURN_IF_ERROR(check_in_live_set(group, processes, *live));
  const uint64_t live_set = live ? live->generation : 0;
  // A group of an older live set, or one that failed, is dropped from the cache (executions that still use
  // it hold it until they finish; it is not aborted, since its members may still finish work issued
  // before the agreement) and the next group is built: under a newer live set from generation 0, so every
  // member process (a restarted one too) asks for the same rendezvous.
  if (e.live_set < live_set) {
    e.spanning.reset();
    e.live_set = live_set;
    e.generation = 0;
  } else if (e.spanning && e.spanning->failed()) {
    e.spanning.reset();
    ++e.generation;
  }
  if (!e.spanning) {
    MCX_ASSIGN_OR_RETURN(e.spanning, build_spanning(group, processes, e.live_set, e.generation, deadline));
  }
  e.changes_seen = changes;
  return std::shared_ptr<Communicator>(e.spanning, &e.spanning->member(rank));
}
}  // namespace mcx
