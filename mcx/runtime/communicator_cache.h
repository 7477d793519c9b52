// Process-wide cache of in-process communicator groups, one LocalGroup per ordered list of devices, so
// every execution over the same group of devices uses the same rendezvous (required: the members of a
// collective must meet in the same group object). Groups live until process exit.
// Thread-safety: thread-safe.
#pragma once

#include <span>

#include "absl/status/statusor.h"
#include "mcx/core/communicator.h"
#include "mcx/runtime/device.h"

namespace mcx {

// The communicator of `member` in the group of `group` (ordered; member must be in it; all local).
absl::StatusOr<Communicator*> local_communicator(std::span<const Device> group, const Device& member);

}  // namespace mcx
