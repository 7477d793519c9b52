// Devices of the job and of this process.
//
// The devices are the selected platforms' (MCX_PLATFORMS; platform/platform_registry.h): devices() and
// local_devices() are the default platform's (the first selected, as JAX's default backend), devices(name) any
// selected platform's. A platform of virtual devices (the CPU's) exposes N per process: N =
// set_cpu_device_count(n) if called before the devices are first used, else MCX_CPU_DEVICE_COUNT (default 1).
// A platform other than the default one has devices of this process only, with global ids after the job's.
// Each local device owns an in-order stream (stream.h) on its own thread, so device-level parallelism and
// collectives are real.
//
// In a multi-process job (distributed::initialize before first use) devices() lists every process's
// devices from core/topology.h, ordered by global id; local_devices() are the ones this process drives,
// ordered by local id. The topology is authoritative for the local count (it records what each process
// contributed, e.g. InitializeOptions::cpu_device_count); a different configured N only logs a warning.
// Single-process: global_id == local_id and process_index == 0 (for the default platform). A topology that
// lists devices of another platform for this process than the one it selected fails the devices' creation.
//
// The first call to any function below creates the devices and calls mark_devices_used(), after which
// distributed::initialize() refuses to run (as jax.distributed.initialize after a backend exists).
// Errors at creation (an invalid MCX_CPU_DEVICE_COUNT: InvalidArgument naming the variable and value; an
// MCX_PLATFORMS list that names an unknown, repeated or unusable platform: its error, platform_registry.h;
// a topology without devices for this process: FailedPrecondition) are thrown by that call, and by
// every later one until fixed.
//
// Lifetime: the devices and streams are created once and never destroyed, so code running during
// static destruction still finds them. At exit() an atexit handler lets every stream drain its queue
// and joins the stream threads; afterwards enqueued work runs inline. A child made by fork() without
// exec inherits the lists but not the stream threads: it must not run device work.
// Thread-safety: all functions are thread-safe; the lists never change after creation.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/error.h"
#include "mcx/core/topology.h"

namespace mcx {

struct Device {
  int global_id = 0;       // unique across the job
  int process_index = 0;   // the controller process that owns it
  int local_id = 0;        // index among this process's devices
  std::string platform = "cpu";
  std::string kind = "cpu";  // the platform's device_kind: "cpu", "NVIDIA H200"

  std::string to_string() const;  // "cpu:0"
  bool is_addressable() const;    // process_index == mcx::process_index()
  friend bool operator==(const Device& a, const Device& b) {
    return a.global_id == b.global_id && a.process_index == b.process_index && a.platform == b.platform;
  }
};

const std::vector<Device>& devices();        // every device of the job, by global id
const std::vector<Device>& local_devices();  // this process's devices, by local id
// The devices of a selected platform ("cpu", "cuda", ...), as jax.devices(backend): the job's for the default
// platform, this process's for another. NotFound (thrown as mcx::Error) naming the selected platforms otherwise.
const std::vector<Device>& devices(std::string_view platform);
const std::vector<Device>& local_devices(std::string_view platform);
// The default platform's devices of process `process_index` (any process of the job), by local id, as
// jax.local_devices(process_index=...). InvalidArgument (thrown as mcx::Error) for an index outside
// [0, process_count()).
std::vector<Device> local_devices(int process_index);
// The devices of the process a ProcessFailure names (JAX's failed_devices): its failed_device_ids as Devices.
std::vector<Device> failed_devices(const ProcessFailure& failure);
// The default platform's name: the first of MCX_PLATFORMS, else the usable platform of highest priority.
std::string default_platform();
int device_count();
int local_device_count();
int process_index();
int process_count();
// The device eager ops on host data and uncommitted arrays run on: local_devices()[0].
const Device& default_device();

// Sets the number of virtual CPU devices of this process (wins over MCX_CPU_DEVICE_COUNT). Must be called
// before devices are created (FailedPrecondition, thrown as mcx::Error, otherwise); n in [1, 1024]
// (InvalidArgument otherwise).
void set_cpu_device_count(int n);

// What this process contributes to a multi-process job, for distributed::initialize to publish before any device
// is made: the default platform's devices (the first of MCX_PLATFORMS) with local ids 0..n-1 (global ids and the
// process index are the caller's to fill). A platform of virtual devices (the CPU's) gets ids->size() of them, else
// cpu_device_count, else set_cpu_device_count's / MCX_CPU_DEVICE_COUNT's count; a device platform (CUDA) opens
// the devices `ids` names (set_requested_local_device_ids: its ordinals, in order), else all it sees. Does not
// make the devices (initialize may still install a topology). Errors: the platform selection's; the platform's
// (a requested id it does not have: InvalidArgument naming it); FailedPrecondition when it has no device.
absl::StatusOr<std::vector<TopologyDevice>> describe_local_devices(const std::optional<std::vector<int>>& ids,
                                                                   std::optional<int> cpu_device_count);

}  // namespace mcx
