// Devices of this process.
//
// Minimal for now: one CPU device. A later issue adds Client, N virtual CPU devices per process
// (MCX_CPU_DEVICE_COUNT), meshes and shardings; Device already carries the fields they need.
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
  friend bool operator==(const Device& a, const Device& b) {
    return a.global_id == b.global_id && a.process_index == b.process_index && a.platform == b.platform;
  }
};

// The devices addressable from this process (today: exactly one CPU device). Thread-safe.
const std::vector<Device>& local_devices();
// The device eager ops and jit place results on: local_devices()[0].
const Device& default_device();

}  // namespace mcx
