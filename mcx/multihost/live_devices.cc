#include "mcx/multihost/live_devices.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/core/peer_group.h"
#include "mcx/distributed/distributed.h"

namespace mcx {

LiveDevices live_devices(const std::vector<Device>& devices, absl::Duration timeout) {
  if (devices.empty()) throw InvalidArgument("[live_devices] expected at least one device, got none");
  std::set<int> hosting;
  for (const Device& d : devices) hosting.insert(d.process_index);
  const int me = process_index();
  if (!hosting.count(me)) {
    throw InvalidArgument(absl::StrCat("[live_devices] process ", me, " hosts none of the ", devices.size(),
                                       " devices asked about (they are on processes {",
                                       absl::StrJoin(hosting, ","), "}); only their processes may call it"));
  }
  LiveDevices out;
  if (!distributed::is_initialized()) {  // one process: everything is live
    static std::atomic<uint64_t> calls{0};
    out.devices = devices;
    out.processes = {me};
    out.incarnations = {0};
    out.generation = ++calls;
    return out;
  }
  const std::vector<distributed::TaskId> tasks(hosting.begin(), hosting.end());
  distributed::LiveTasks live = value_or_throw(distributed::agent()->get_live_tasks(tasks, timeout));
  const std::set<int> alive(live.tasks.begin(), live.tasks.end());
  for (int p : hosting) {
    if (alive.count(p)) continue;
    abort_peer_groups_of_process(
        p, mark_process_failure(absl::UnavailableError(absl::StrCat(
                                    "[live_devices] process ", p, " is not live (generation ", live.generation,
                                    " of the live set of processes {", absl::StrJoin(hosting, ","), "})")),
                                p));
  }
  for (const Device& d : devices) {
    if (alive.count(d.process_index)) out.devices.push_back(d);
  }
  out.processes.assign(live.tasks.begin(), live.tasks.end());
  out.incarnations = live.incarnations;
  out.generation = live.generation;
  return out;
}

}  // namespace mcx
