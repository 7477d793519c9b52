#include "mcx/core/topology.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/mutex.h"

namespace mcx {
namespace {

struct Registry {
  Mutex mu;
  std::optional<Topology> topology ABSL_GUARDED_BY(mu);
  bool devices_used ABSL_GUARDED_BY(mu) = false;
  std::optional<std::vector<int>> requested_ids ABSL_GUARDED_BY(mu);
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: read from other threads at exit
  return *r;
}

absl::Status check_topology(const Topology& t) {
  if (t.process_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[set_distributed_topology] process_count must be >= 1, got ", t.process_count));
  }
  if (t.process_index < 0 || t.process_index >= t.process_count) {
    return absl::InvalidArgumentError(absl::StrCat("[set_distributed_topology] process_index ", t.process_index,
                                                   " is outside [0, ", t.process_count, ")"));
  }
  if (!t.process_hosts.empty() && static_cast<int>(t.process_hosts.size()) != t.process_count) {
    return absl::InvalidArgumentError(absl::StrCat("[set_distributed_topology] ", t.process_hosts.size(),
                                                   " process hosts for ", t.process_count, " processes"));
  }
  for (size_t i = 0; i < t.devices.size(); ++i) {
    const TopologyDevice& d = t.devices[i];
    if (d.global_id != static_cast<int>(i)) {
      return absl::InvalidArgumentError(absl::StrCat("[set_distributed_topology] device ", i, " has global id ",
                                                     d.global_id, "; expected dense ids sorted from 0"));
    }
    if (d.process_index < 0 || d.process_index >= t.process_count) {
      return absl::InvalidArgumentError(absl::StrCat("[set_distributed_topology] device ", i,
                                                     " belongs to process ", d.process_index,
                                                     " outside [0, ", t.process_count, ")"));
    }
    if (i > 0 && t.devices[i - 1].process_index > d.process_index) {
      return absl::InvalidArgumentError(absl::StrCat("[set_distributed_topology] devices must be ordered by "
                                                     "process index; device ", i, " is out of order"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status set_distributed_topology(Topology topology) {
  if (absl::Status s = check_topology(topology); !s.ok()) return s;
  Registry& r = registry();
  MutexLock lock(&r.mu);
  if (r.devices_used) {
    return absl::FailedPreconditionError(
        "[set_distributed_topology] devices were already used in this process; the distributed topology must "
        "be installed (mcx::distributed::initialize) before any device is created");
  }
  if (r.topology.has_value()) {
    return absl::FailedPreconditionError("[set_distributed_topology] a distributed topology is already installed");
  }
  r.topology = std::move(topology);
  return absl::OkStatus();
}

void clear_distributed_topology() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.topology.reset();
}

std::optional<Topology> distributed_topology() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  return r.topology;
}


int topology_process_count() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  return r.topology ? r.topology->process_count : 1;
}

void mark_devices_used() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.devices_used = true;
}

bool devices_used() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  return r.devices_used;
}

void set_requested_local_device_ids(std::optional<std::vector<int>> ids) {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.requested_ids = std::move(ids);
}

std::optional<std::vector<int>> requested_local_device_ids() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  return r.requested_ids;
}

void reset_topology_for_testing() {
  Registry& r = registry();
  MutexLock lock(&r.mu);
  r.devices_used = false;
  r.topology.reset();
  r.requested_ids.reset();
}

}  // namespace mcx
