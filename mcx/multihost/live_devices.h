// mcx::live_devices: which of some devices are live, agreed by every live process that hosts one (JAX's
// jax.live_devices, on CPU, with a deadline JAX lacks). The building block of fault-tolerant training: after a
// failure, the survivors call it, build a mesh over the devices it returns and retry the step.
//
//   mcx::LiveDevices live = mcx::live_devices(mcx::devices());
//   mcx::Mesh mesh = mcx::make_mesh({int64_t(live.devices.size())}, {"data"}, live.devices);
//
// Semantics: the call blocks until every *live* process that hosts one of `devices` has called it (over the
// same set of processes), then returns the same result to all of them: the requested devices of the processes
// that called, in the order requested (device ids are never renumbered), those processes with their
// incarnations, and the agreement's generation. Guarantee (JAX's formal one): at some instant during the call
// every returned process was in the call and every other requesting process was dead, as the coordination
// service saw it. A process that dies during the call is not waited for; one that restarted (new incarnation)
// and calls is included. Generations grow by one with each agreement over the same processes, so a set agreed
// later is always told apart from an earlier one.
// Side effect: data-plane groups that include a requested process found dead are aborted (their collectives
// fail with mcx::ProcessFailure), so nothing keeps waiting for it.
// Errors (mcx::Error subclasses): InvalidArgument when `devices` is empty or this process hosts none of them;
// DeadlineExceeded after `timeout`, naming the live processes that did not call; Aborted when this process
// itself is no longer live. In a program that did not call mcx::distributed::initialize (one process) every
// device is live and the generation counts the calls.
// Thread-safety: call from the thread that drives the job; every live process must make the same calls in the
// same order (like collectives).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "mcx/runtime/device.h"

namespace mcx {

struct LiveDevices {
  std::vector<Device> devices;         // the live ones among those requested, in the requested order
  std::vector<int> processes;          // the live processes hosting them, ascending
  std::vector<uint64_t> incarnations;  // parallel to processes (0 without a coordination service)
  uint64_t generation = 0;             // the same on every member; grows with each agreement
};

LiveDevices live_devices(const std::vector<Device>& devices, absl::Duration timeout = absl::Seconds(60));

}  // namespace mcx
