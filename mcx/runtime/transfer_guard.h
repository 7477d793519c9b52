// Transfer guard (jax.transfer_guard): allow, log or disallow data movement between host and devices.
//
// Three directions: host_to_device, device_to_device, device_to_host. Five levels per direction:
//   allow              every transfer is fine (the default)
//   log                implicit transfers are logged (warning), explicit ones allowed
//   disallow           implicit transfers throw mcx::TransferGuardError, explicit ones allowed
//   log_explicit       every transfer is logged
//   disallow_explicit  every transfer throws
// Explicit transfers are device_put, device_get and Array::to_host (incl. device_put to a CPU device).
// Implicit ones: host data (an Array made from a Buffer or C++ values that was never placed) used by a
// computation, an array printed or converted to a host value (item, to_vector, operator bool,
// to_string), and an implicit reshard (jit called with an array whose sharding differs from its
// in_shardings, or eager ops on committed arrays of different shardings). C++ scalars folded into
// programs as literals are not transfers.
//
// Settings: process-wide defaults from MCX_TRANSFER_GUARD (all directions) and
// MCX_TRANSFER_GUARD_HOST_TO_DEVICE / _DEVICE_TO_DEVICE / _DEVICE_TO_HOST (override per direction), or
// set_transfer_guard(); thread-local RAII scopes override them and nest (the innermost wins; leaving a
// scope restores the previous setting). An invalid level in the environment is reported at first use
// (InvalidArgument naming the variable and the accepted values), never ignored.
//
// Messages name the direction, the array's type, whether the transfer was explicit, and the level:
//   "[transfer_guard] disallowed implicit host-to-device transfer of f32[256,784] (jit of 'step' argument 1);
//    the host-to-device transfer guard is 'disallow'"
// Logged transfers are warnings on the mcx logger with the same text without "disallowed ".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mcx/core/error.h"
#include "mcx/core/shape.h"

namespace mcx {

enum class TransferGuardLevel { kAllow, kLog, kDisallow, kLogExplicit, kDisallowExplicit };
enum class TransferDirection { kHostToDevice, kDeviceToDevice, kDeviceToHost };

std::string_view transfer_guard_level_name(TransferGuardLevel level);  // "allow", ...
std::string_view transfer_direction_name(TransferDirection direction);  // "host-to-device", ...
// Parses "allow" | "log" | "disallow" | "log_explicit" | "disallow_explicit"; nullopt otherwise.
std::optional<TransferGuardLevel> parse_transfer_guard_level(std::string_view text);

class TransferGuardError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Process-wide defaults (all directions / one direction). Thread-safe.
void set_transfer_guard(TransferGuardLevel level);
void set_transfer_guard(TransferDirection direction, TransferGuardLevel level);
// The level in effect on this thread for a direction (scopes, then process setting, then env).
// InvalidArgument (thrown) when an MCX_TRANSFER_GUARD* variable holds an invalid level, even if a scope
// or process setting would hide it (a misspelt setting is reported, not ignored).
TransferGuardLevel transfer_guard_level(TransferDirection direction);

// RAII scope on the calling thread; not copyable or movable.
class TransferGuard {
 public:
  explicit TransferGuard(TransferGuardLevel level);  // all directions
  TransferGuard(TransferDirection direction, TransferGuardLevel level);
  ~TransferGuard();
  TransferGuard(const TransferGuard&) = delete;
  TransferGuard& operator=(const TransferGuard&) = delete;

 private:
  std::optional<TransferGuardLevel> saved_[3];
  bool set_[3] = {false, false, false};
};

// Called at every transfer point: logs or throws TransferGuardError per the level in effect. `what`
// names the context ("jit of 'step' argument 1", "device_put", "print").
// Errors: TransferGuardError when disallowed; InvalidArgument (thrown) for a bad MCX_TRANSFER_GUARD*
// value. Thread-safe (reads this thread's scopes).
void check_transfer(TransferDirection direction, const AbstractValue& aval, bool is_explicit,
                    std::string_view what);

namespace detail {
// Test-only: forget set_transfer_guard() settings and the cached environment (re-read at next use).
// Not safe while other threads check transfers.
void reset_transfer_guard_for_testing();
}  // namespace detail

}  // namespace mcx
