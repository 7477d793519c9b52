// Process-wide registry of the job's topology: this process's index, the process count and the global
// device list. mcx::distributed::initialize() fills it after exchanging every process's local devices
// through the coordination key-value store; the runtime layer reads it when it builds its devices.
//
// Layering: lives in core so that distributed (which includes only core) can write it and runtime can
// read it without either including the other.
//
// Thread-safety: every function is thread-safe (one process-wide mutex).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mcx {

// One device of the job as every process sees it.
struct TopologyDevice {
  int global_id = 0;      // dense 0..D-1, ordered by (process_index, local_id)
  int process_index = 0;  // the process that owns it
  int local_id = 0;       // its id within that process
  std::string platform;   // "cpu", ...
  std::string kind;       // e.g. "cpu"
  bool operator==(const TopologyDevice&) const = default;
};

struct Topology {
  int process_index = 0;
  int process_count = 1;
  std::vector<TopologyDevice> devices;  // every process's devices, sorted by global_id
  // The host each process runs on, one opaque key per process (equal keys: the same host), or empty when
  // unknown. Collectives across processes use it to keep traffic within a host before it crosses hosts
  // (peer_collectives.h). distributed::initialize() fills it from each process's host_identity() (cluster.h).
  std::vector<std::string> process_hosts;
  bool operator==(const Topology&) const = default;
};

// Installs the multi-process topology. Errors: FailedPrecondition if devices were already used
// (mark_devices_used() was called) or a topology is already installed; InvalidArgument if the topology is
// inconsistent (process_index out of range, global ids not dense/sorted, a device of an unknown process).
absl::Status set_distributed_topology(Topology topology);

// Removes the installed topology (distributed::shutdown()). Returns to single-process defaults.
void clear_distributed_topology();

// The installed multi-process topology, or nullopt when this is a single-process run.
std::optional<Topology> distributed_topology();

// Convenience: the process count from the installed topology, or 1 when none is installed.
int topology_process_count();

// The runtime layer calls this when it first creates devices (backend initialisation). Once set,
// distributed::initialize() refuses to run, as jax.distributed.initialize does after a backend exists.
void mark_devices_used();
bool devices_used();

// The devices this process asked for by id (distributed::initialize's local_device_ids or MCX_LOCAL_DEVICE_IDS):
// a device platform opens only these of its devices, in this order (CUDA: ordinals as CUDA_VISIBLE_DEVICES
// leaves them), as jax.distributed.initialize(local_device_ids=...). Set before the platform first opens its
// devices; nullopt (the default): every device the platform sees.
void set_requested_local_device_ids(std::optional<std::vector<int>> ids);
std::optional<std::vector<int>> requested_local_device_ids();

// Test-only: forget that devices were used and drop the topology and the requested ids.
void reset_topology_for_testing();

}  // namespace mcx
