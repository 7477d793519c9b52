#include "mcx/collectives/peer_group.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/collectives/collective_group.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"
#include "mcx/core/topology.h"
#include "mcx/collectives/live_set.h"

namespace mcx {
namespace {

struct FactoryRegistry {
  Mutex mu;
  std::string backend ABSL_GUARDED_BY(mu);
  PeerGroupFactory factory ABSL_GUARDED_BY(mu);
};

FactoryRegistry& registry() {
  static FactoryRegistry* r = new FactoryRegistry();  // never destroyed: streams may build groups until exit
  return *r;
}

// Every group make_peer_group built that is still alive, with its processes, so that a process reported
// dead can abort the groups that wait for it.
struct LiveGroups {
  Mutex mu;
  std::map<PeerGroup*, std::vector<int>> groups ABSL_GUARDED_BY(mu);
};

LiveGroups& live_groups() {
  static LiveGroups* l = new LiveGroups();  // never destroyed: groups may be destroyed during exit
  return *l;
}

// What make_peer_group returns: the factory's group, registered in live_groups() while it lives.
class TrackedPeerGroup final : public PeerGroup {
 public:
  TrackedPeerGroup(std::unique_ptr<PeerGroup> inner, std::vector<int> processes)
      : inner_(std::move(inner)), hosts_(hosts_of(processes)) {
    LiveGroups& l = live_groups();
    MutexLock lock(&l.mu);
    l.groups[this] = std::move(processes);
  }
  ~TrackedPeerGroup() override {
    LiveGroups& l = live_groups();
    MutexLock lock(&l.mu);  // held while inner_ dies: an abort never meets a dying group
    l.groups.erase(this);
    inner_.reset();
  }
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  std::string description() const override { return inner_->description(); }
  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    absl::Status s = inner_->exchange(sends, recvs, deadline, on_recv);
    if (!s.ok()) record(s);
    return s;
  }
  void abort(const absl::Status& why) override {
    record(why.ok() ? absl::AbortedError("[data plane] aborted") : why);
    inner_->abort(why);
  }
  bool failed() const override { return failed_.load(std::memory_order_acquire); }
  absl::Status failure() const override {
    MutexLock lock(&mu_);
    return failure_;
  }
  std::span<const int> hosts() const override { return hosts_; }

 private:
  // Dense host indices of the group's processes from the topology's process_hosts; empty when it has none.
  static std::vector<int> hosts_of(const std::vector<int>& processes) {
    const std::optional<Topology> topology = distributed_topology();
    if (!topology || topology->process_hosts.empty()) return {};
    std::vector<int> hosts;
    std::vector<std::string> seen;
    for (int p : processes) {
      if (p < 0 || p >= static_cast<int>(topology->process_hosts.size())) return {};
      const std::string& key = topology->process_hosts[static_cast<size_t>(p)];
      auto it = std::find(seen.begin(), seen.end(), key);
      hosts.push_back(static_cast<int>(it - seen.begin()));
      if (it == seen.end()) seen.push_back(key);
    }
    return hosts;
  }

  void record(const absl::Status& s) {
    {
      MutexLock lock(&mu_);
      if (failure_.ok()) failure_ = s;
    }
    failed_.store(true, std::memory_order_release);
  }
  std::unique_ptr<PeerGroup> inner_;
  const std::vector<int> hosts_;
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int abort_peer_groups_of_process(int process, const absl::Status& why) {
  LiveGroups& l = live_groups();
  MutexLock lock(&l.mu);
  int aborted = 0;
  for (auto& [group, processes] : l.groups) {
    if (std::find(processes.begin(), processes.end(), process) == processes.end()) continue;
    group->abort(why);
    ++aborted;
  }
  return aborted;
}

void set_peer_group_factory(std::string backend, PeerGroupFactory factory) {
  FactoryRegistry& r = registry();
  MutexLock lock(&r.mu);
  r.backend = factory ? std::move(backend) : std::string();
  r.factory = std::move(factory);
}

absl::StatusOr<std::unique_ptr<PeerGroup>> make_peer_group(const PeerGroupRequest& request) {
  if (absl::Status failed = reported_process_failure(request.processes); !failed.ok()) {
    return with_message(failed, absl::StrCat("[collective] ", request.key, " needs processes {",
                                             absl::StrJoin(request.processes, ","), "}, but ", failed.message()));
  }
  PeerGroupFactory factory;
  {
    FactoryRegistry& r = registry();
    MutexLock lock(&r.mu);
    factory = r.factory;
  }
  if (!factory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[collective] ", request.key, " spans processes {", absl::StrJoin(request.processes, ","),
        "} but no data plane is installed: call mcx::distributed::initialize() in every process first"));
  }
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<PeerGroup> group, factory(request));
  return std::unique_ptr<PeerGroup>(new TrackedPeerGroup(std::move(group), request.processes));
}

std::string peer_group_backend() {
  FactoryRegistry& r = registry();
  MutexLock lock(&r.mu);
  return r.backend;
}

absl::Status peer_group_unusable(const std::string& description, const absl::Status& first_error) {
  return group_unusable("data plane", description, first_error);
}

}  // namespace mcx
