// The CPUs a process may run on, and the cores they belong to.
//
// A process's affinity mask (set by `taskset`, a cgroup cpuset, Slurm's or mcx-run's binding) can be smaller
// than the machine: every default that sizes itself to "the CPUs" (the CPU backend's worker threads, checkpoint
// I/O threads, the coordinator's reactors) counts these, not std::thread::hardware_concurrency(), so that a
// process bound to 2 of 64 CPUs starts 2 workers, not 64 that fight over 2.
//
// CPU numbers are the kernel's (0-based, as in /proc/cpuinfo and taskset -c).
// Errors: none; where the mask cannot be read, every CPU the machine reports is taken as allowed.
// Thread-safety: pure functions (they read the calling thread's mask and sysfs).
#pragma once

#include <sched.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx {

// The CPUs the calling thread may run on, ascending (at least one).
std::vector<int> allowed_cpus();

// allowed_cpus().size(): the default for thread counts that should use every CPU this process has.
int allowed_cpu_count();

// `cpus` ordered by (package, core, CPU number) from /sys/devices/system/cpu/cpu<N>/topology: hardware threads of one
// core adjacent, cores of one package (socket) adjacent. CPUs sysfs gives no topology for come first, by number.
// Cutting the result into consecutive blocks gives each block whole cores of one package where the counts allow.
std::vector<int> cpus_in_core_order(std::vector<int> cpus);

// The kernel's set of `cpus` (for sched_setaffinity, e.g. in a child between fork and exec, where nothing may be
// allocated). InvalidArgument for an empty list or a CPU number out of range.
absl::StatusOr<cpu_set_t> cpu_set_of(const std::vector<int>& cpus);

// Restricts the calling thread (and what it later starts or execs) to `cpus`. cpu_set_of's errors; the kernel's
// (e.g. EINVAL: none of them is allowed here) as Internal.
absl::Status bind_to_cpus(const std::vector<int>& cpus);

}  // namespace mcx
