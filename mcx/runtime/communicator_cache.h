// Process-wide cache of communicator groups, one per ordered list of devices, so every execution over the
// same devices meets in the same group object (required: the members of a collective must rendezvous in one
// place).
//  - A group of this process's devices is a LocalGroup (shared memory); it lives until process exit.
//  - A group that spans processes is a SpanningGroup (collectives/spanning_group.h) over a PeerGroup built by the
//    data plane that mcx::distributed::initialize installed. It is built on first use by whichever local
//    member gets there first (the others wait for it); building blocks until every member process has joined
//    or the deadline passes. Groups are keyed by (devices, live set, generation): a group that failed is
//    dropped and the next use builds the next generation, so one failure does not poison those devices
//    forever; once the job agrees on a newer live set (collectives/live_set.h), a group built under an older one is
//    dropped, and the next use builds one under the new live set (generation 0 on every member,
//    a restarted process too). A group that includes a process outside the live set is refused.
//    Dropped groups are freed when the last execution using them finishes.
// Cross-process reductions are in rank order within a process and ring order between processes; with
// MCX_DETERMINISTIC_REDUCTIONS=1 they are bitwise identical to a single process (collectives/spanning_group.h).
// Thread-safety: thread-safe; different groups are built concurrently (a process may be connecting several
// groups at once, each waiting for its own peers).
#pragma once

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/collectives/communicator.h"
#include "mcx/runtime/device.h"

namespace mcx {

// The communicator of `member` (a local device) in the group `group` (ordered, contains member); the
// returned pointer keeps its group alive. Errors: InternalError if member is not in group;
// FailedPrecondition when the group spans processes and no data plane is installed, or when it includes a
// process outside the current live set (marked as that process's failure: mcx::ProcessFailure); the data
// plane's connect errors (DeadlineExceeded naming the processes).
absl::StatusOr<std::shared_ptr<Communicator>> group_communicator(std::span<const Device> group, const Device& member,
                                                                 absl::Time deadline);

}  // namespace mcx
