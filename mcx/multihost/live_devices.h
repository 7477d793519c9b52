// mcx::live_devices: which of some devices are live, agreed by every live process that hosts one (JAX's
// jax.live_devices, on CPU, with a deadline JAX lacks). The building block of fault-tolerant training. Two
// forms (docs/fault_tolerance.md):
//
//   // The scope: the body completes on every live process or raises on every one.
//   float loss = mcx::with_live_devices(mcx::devices(), [&](const mcx::LiveDevices& live) {
//     mcx::Mesh mesh = mcx::make_mesh({int64_t(live.devices.size())}, {"data"}, live.devices);
//     return step(mesh, ...).item<float>();  // wait for the results inside the body
//   });
//
//   // The plain agreement (a call, no body).
//   mcx::LiveDevices live = mcx::live_devices(mcx::devices());
//
// The agreement: the call blocks until every *live* process that hosts one of `devices` has called it (over
// the same set of processes), then returns the same result to all of them: the requested devices of the
// processes that called, in the order requested (device ids are never renumbered), those processes with their
// incarnations, and the live set's generation. Guarantee (JAX's formal one): at some instant during the call
// every returned process was in the call and every other requesting process was dead, as the coordination
// service saw it. A process that dies during the call is not waited for; one that restarted (new incarnation)
// and calls is included. The generation is job-wide: agreements on the same processes and incarnations carry
// the same number, a different live set a larger one. Each agreement is recorded as this process's live set
// (collectives/live_set.h): the data plane then builds its groups under that generation and refuses groups that
// include a process outside it (mcx::ProcessFailure), so a mesh must be built over the agreed devices.
// Side effect: data-plane groups that include a requested process found dead are aborted (their collectives
// fail with mcx::ProcessFailure), so nothing keeps waiting for it.
//
// The scope, with_live_devices(devices, body): agrees on entry, runs body(live), then agrees again on exit,
// each process carrying the outcome of its body (after draining its local devices' streams). The exit
// agreement is reused as the next scope's entry over the same devices (one agreement per scope, as in JAX),
// and a process calling the scope for the first time (a restarted one) meets the others there. Outcome, the
// same on every process of the entry set that is still live:
//   - every entry member finished its body without error and is still live (same incarnation): the body's
//     result is returned. Processes that joined at the exit (restarted ones) do not change this; they are
//     members of the next scope.
//   - an entry member died or restarted during the body: every survivor throws mcx::ProcessFailure naming it
//     (the lowest such process), also those whose body succeeded;
//   - otherwise some member's body raised: the process whose error it was rethrows its own exception, the others
//     throw an mcx::Error of the same code (mcx::Internal for an exception that is not an mcx::Error) naming
//     that process and its message. A process whose body raises
//     first aborts its data-plane groups, so the others' collectives waiting for it fail at once instead of
//     at their deadline. The error chosen is the lowest process's error that is not a process failure (a
//     process failure seen by a live process is usually the abort's echo), else the lowest one's.
// So the body's effects on program state should be committed only after the scope returns (assign the new
// parameters from its result): on failure every survivor retries from the same state. Work the body issued
// but did not wait for is drained before the exit agreement; its errors surface where its results are read.
//
// Errors of both forms (mcx::Error subclasses): InvalidArgument when `devices` is empty or this process hosts
// none of them; FailedPrecondition for a scope entered while another one runs (nested, or on another thread); DeadlineExceeded after `timeout` (per agreement), naming the live processes that did not
// call; Aborted when this process itself is no longer live. In a program that did not call
// mcx::distributed::initialize (one process) every device is live, the generation is 1 and the scope runs the
// body and propagates its exception.
// Thread-safety: call from the thread that drives the job; every live process must make the same calls in the
// same order (like collectives). Scopes do not nest (checked).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "mcx/runtime/device.h"

namespace mcx {

struct LiveDevices {
  std::vector<Device> devices;         // the live ones among those requested, in the requested order
  std::vector<int> processes;          // the live processes hosting them, ascending
  std::vector<uint64_t> incarnations;  // parallel to processes (0 without a coordination service)
  uint64_t generation = 0;             // the same on every member; see above
};

LiveDevices live_devices(const std::vector<Device>& devices, absl::Duration timeout = absl::Seconds(60));

namespace detail {

// The two agreements of a scope (with_live_devices is this plus exception handling).
class LiveDevicesScope {
 public:
  // The entry agreement: the last scope's exit over the same devices, or a new agreement.
  LiveDevicesScope(const std::vector<Device>& devices, absl::Duration timeout);
  ~LiveDevicesScope();
  LiveDevicesScope(const LiveDevicesScope&) = delete;
  LiveDevicesScope& operator=(const LiveDevicesScope&) = delete;
  const LiveDevices& live() const { return entry_; }
  // The exit agreement with this process's outcome (`body_error` null: the body succeeded). Returns when the
  // scope completed on every entry member; otherwise throws as described above (rethrowing body_error when
  // it is the chosen error).
  void exit(std::exception_ptr body_error);

 private:
  std::vector<Device> devices_;
  std::vector<int> hosting_;  // the processes hosting devices_, ascending
  absl::Duration timeout_;
  LiveDevices entry_;
  bool entered_ = false;  // this object holds the process's one running scope
};

}  // namespace detail

// Runs body(live) on the agreed live devices; see the header comment for the outcome. Returns the body's
// result (void bodies return nothing).
template <typename Body>
auto with_live_devices(const std::vector<Device>& devices, Body&& body, absl::Duration timeout = absl::Seconds(60))
    -> std::invoke_result_t<Body, const LiveDevices&> {
  using Result = std::invoke_result_t<Body, const LiveDevices&>;
  detail::LiveDevicesScope scope(devices, timeout);
  if constexpr (std::is_void_v<Result>) {
    std::exception_ptr error;
    try {
      std::invoke(std::forward<Body>(body), scope.live());
    } catch (...) {
      error = std::current_exception();
    }
    scope.exit(error);
  } else {
    std::optional<Result> result;
    std::exception_ptr error;
    try {
      result.emplace(std::invoke(std::forward<Body>(body), scope.live()));
    } catch (...) {
      error = std::current_exception();
    }
    scope.exit(error);
    return std::move(*result);
  }
}

}  // namespace mcx
