// ExecutionContext: which device an execution runs on, and what its SPMD ops (ir op.h: all_reduce, ...,
// axis_index) need at run time, whatever the platform: which partition this execution is and how to reach the
// other members of a replica group. The runtime builds one per device per execution (for a single-device
// execution: partition 0 of 1, without a communicator); programs without SPMD ops use only the device.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/collectives/communicator.h"

namespace mcx {

struct ExecutionContext {
  int partition_id = 0;
  int num_partitions = 1;
  // This member's communicator for `group` (partition ids in group order, containing partition_id). The
  // returned pointer must stay valid until execute() returns. Called from the executing thread.
  std::function<absl::StatusOr<Communicator*>(std::span<const int64_t> group)> communicator;
  // Deadline for each collective of this execution (DeadlineExceeded names the op and the missing ranks).
  absl::Time deadline = absl::InfiniteFuture();
  // How many partitions of this execution run at once in this process, sharing its host threads: a platform
  // whose kernels run on host threads gives each a share.
  int local_partitions = 1;
  // The device this execution runs on: an index among this process's devices of the executable's platform
  // (Device::local_id). An executable called without a context runs on local device 0.
  int local_device = 0;
};

}  // namespace mcx
