// Devices of the job and of this process.
//
// The CPU platform exposes N virtual devices per process: N = set_cpu_device_count(n) if called before
// the devices are first used, else MCX_CPU_DEVICE_COUNT (default 1). Each local device owns an in-order
// stream (stream.h) on its own thread, so device-level parallelism and collectives are real.
//
// In a multi-process job (distributed::initialize before first use) devices() lists every process's
// devices from core/topology.h, ordered by global id; local_devices() are the ones this process drives.
// Single-process: global_id == local_id and process_index == 0.
//
// The first call to any function below creates the devices and calls mark_devices_used(), after which
// distributed::initialize() refuses to run (as jax.distributed.initialize after a backend exists).
// Thread-safety: all functions are thread-safe; the lists never change after creation.
#pragma once

#include <string>
#include <vector>

namespace mcx {

struct Device {
  int global_id = 0;       // unique across the job
  int process_index = 0;   // the controller process that owns it
  int local_id = 0;        // index among this process's devices
  std::string platform = "cpu";
  std::string kind = "cpu";

  std::string to_string() const;  // "cpu:0"
  bool is_addressable() const;    // process_index == mcx::process_index()
  friend bool operator==(const Device& a, const Device& b) {
    return a.global_id == b.global_id && a.process_index == b.process_index && a.platform == b.platform;
  }
};

const std::vector<Device>& devices();        // every device of the job, by global id
const std::vector<Device>& local_devices();  // this process's devices, by local id
int device_count();
int local_device_count();
int process_index();
int process_count();
// The device eager ops on host data and uncommitted arrays run on: local_devices()[0].
const Device& default_device();

// Sets the number of virtual CPU devices of this process. Must be called before devices are created
// (FailedPrecondition, thrown as mcx::Error, otherwise); n >= 1 (InvalidArgument otherwise).
void set_cpu_device_count(int n);

}  // namespace mcx
