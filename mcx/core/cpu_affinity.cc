#include "mcx/core/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace mcx {
namespace {

// A topology number of `cpu` from sysfs (physical_package_id, core_id), or -1 where it is not there.
int topology_id(int cpu, const char* name) {
  std::ifstream in(absl::StrCat("/sys/devices/system/cpu/cpu", cpu, "/topology/", name));
  int id = -1;
  if (!(in >> id)) return -1;
  return id;
}

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int cpu = 0; cpu < n; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

int allowed_cpu_count() { return static_cast<int>(allowed_cpus().size()); }

std::vector<int> cpus_in_core_order(std::vector<int> cpus) {
  std::vector<std::tuple<int, int, int>> keyed;  // (package, core, cpu)
  for (int cpu : cpus) keyed.emplace_back(topology_id(cpu, "physical_package_id"), topology_id(cpu, "core_id"), cpu);
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 0; i < keyed.size(); ++i) cpus[i] = std::get<2>(keyed[i]);
  return cpus;
}

absl::StatusOr<cpu_set_t> cpu_set_of(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("[cpu affinity] no CPUs to bind to; expected at least one");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return absl::InvalidArgumentError(
          absl::StrCat("[cpu affinity] CPU ", cpu, " is out of range; expected 0 to ", CPU_SETSIZE - 1));
    }
    CPU_SET(cpu, &set);
  }
  return set;
}

absl::Status bind_to_cpus(const std::vector<int>& cpus) {
  absl::StatusOr<cpu_set_t> set = cpu_set_of(cpus);
  if (!set.ok()) return set.status();
  if (sched_setaffinity(0, sizeof(*set), &*set) != 0) {
    return absl::InternalError(absl::StrCat("[cpu affinity] sched_setaffinity: ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace mcx
