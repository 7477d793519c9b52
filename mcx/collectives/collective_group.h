// CollectiveGroup: a group of devices that run collectives together, as the runtime holds it. It hands out one
// Communicator (communicator.h) per member rank hosted by this process, and fails as a whole.
//
// Implementations: LocalGroup (local_communicator.h: every member in this process, shared memory) and
// SpanningGroup (spanning_group.h: members on several processes, shared memory inside each, a PeerGroup
// between them).
//
// Failure: after any error of any member (a deadline, a mismatch, a dead peer) or an abort(), the group has
// failed: failed() is true, failure() is the first error, and every later collective on any member returns
// Aborted "[<collective>] <group> is unusable after an earlier error: <first error>" (keeping the first error's
// payloads, e.g. its process-failure mark). Its owner drops it and builds a new one.
//
// Thread-safety: size, failed, failure and abort from any thread; each member's Communicator is used by one
// thread at a time (its device's stream).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "mcx/collectives/communicator.h"

namespace mcx {

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  // Members of the whole group (ranks 0..size()-1, on every process).
  virtual int size() const = 0;
  // The communicator of rank `rank`, which must be hosted by this process (owned by the group).
  virtual Communicator& member(int rank) = 0;
  // Whether the group has failed (see above); also true once a group it relies on failed from elsewhere (a
  // SpanningGroup's peer group aborted by the failure watch), before any member used it again.
  virtual bool failed() const = 0;
  // The first error once failed; OK while usable.
  virtual absl::Status failure() const = 0;
  // Fails the group from any thread: members blocked in a collective return `why` promptly.
  virtual void abort(const absl::Status& why) = 0;
};

// What a failed group answers every later call with: Aborted "[<what>] <description> is unusable after an
// earlier error: <first error>", keeping the first error's payloads (its process-failure mark). Every group of
// this layer (and PeerGroup, peer_group_unusable) builds the message here.
absl::Status group_unusable(std::string_view what, std::string_view description, const absl::Status& first_error);

}  // namespace mcx
