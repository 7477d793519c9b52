#include "mcx/runtime/communicator_cache.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/local_communicator.h"
#include "mcx/core/peer_group.h"
#include "mcx/core/spanning_group.h"

namespace mcx {
namespace {

struct Entry {
  std::mutex mu;  // serialises building and replacing this entry's group (not the whole cache)
  std::unique_ptr<LocalGroup> local;         // all members in this process
  std::unique_ptr<SpanningGroup> spanning;   // current generation, when the group spans processes
  uint64_t generation = 0;                   // guarded by mu
};

struct Cache {
  std::mutex mu;
  std::map<std::vector<int>, std::unique_ptr<Entry>> entries;  // guarded by mu
  std::vector<std::unique_ptr<SpanningGroup>> retired;         // guarded by mu: failed groups, kept alive
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: streams use groups until exit
  return *c;
}

Entry& entry_for(const std::vector<int>& key) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  std::unique_ptr<Entry>& e = c.entries[key];
  if (!e) e = std::make_unique<Entry>();
  return *e;
}

absl::StatusOr<std::unique_ptr<SpanningGroup>> build_spanning(std::span<const Device> group, uint64_t generation,
                                                              absl::Time deadline) {
  std::vector<SpanningMember> members;
  std::vector<int> processes;
  std::vector<int> ids;
  for (const Device& d : group) {
    members.push_back(SpanningMember{d.process_index, d.is_addressable(), d.to_string()});
    processes.push_back(d.process_index);
    ids.push_back(d.global_id);
  }
  std::sort(processes.begin(), processes.end());
  processes.erase(std::unique(processes.begin(), processes.end()), processes.end());
  PeerGroupRequest request{processes, absl::StrCat("devices ", absl::StrJoin(ids, ",")), generation, deadline};
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<PeerGroup> peers, make_peer_group(request));
  MCX_ASSIGN_OR_RETURN(bool deterministic, kDeterministicReductionsFlag.get());
  return SpanningGroup::create(std::move(members), std::move(peers), SpanningGroupOptions{deterministic});
}

}  // namespace

absl::StatusOr<Communicator*> group_communicator(std::span<const Device> group, const Device& member,
                                                 absl::Time deadline) {
  std::vector<int> key;
  int rank = -1;
  bool spans = false;
  for (const Device& d : group) {
    if (d == member) rank = static_cast<int>(key.size());
    key.push_back(d.global_id);
    spans = spans || !d.is_addressable();
  }
  if (rank < 0) {
    return absl::InternalError(absl::StrCat("[collective] ", member.to_string(), " is not in its group"));
  }
  Entry& e = entry_for(key);
  std::lock_guard<std::mutex> lock(e.mu);
  if (!spans) {
    if (!e.local) {
      std::vector<std::string> names;
      for (const Device& d : group) names.push_back(d.to_string());
      e.local = std::make_unique<LocalGroup>(static_cast<int>(key.size()), std::move(names));
    }
    return &e.local->member(rank);
  }
  if (e.spanning && e.spanning->failed()) {
    Cache& c = cache();
    std::lock_guard<std::mutex> retire(c.mu);
    c.retired.push_back(std::move(e.spanning));
    ++e.generation;
  }
  if (!e.spanning) {
    MCX_ASSIGN_OR_RETURN(e.spanning, build_spanning(group, e.generation, deadline));
  }
  return &e.spanning->member(rank);
}
}  // namespace mcx
