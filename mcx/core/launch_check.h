// LaunchCheck: the check that every process of a group is running the same thing at the same point, folded
// into the first exchange of a collective (a Piggyback, peer_collectives.h). Each process sends its LaunchTag
// (program name, fingerprint, sequence number) to its ring successor and compares the predecessor's with its
// own before the data behind it is used; around the ring, all agree or someone fails at once with
// FailedPrecondition naming both programs and both processes. The spanning group checks each launch of a
// computation this way; the multihost utilities check each call (name and sequence).
// Thread-safety: one object per exchange, used by the thread running it. Not copyable (the piggyback points
// into it).
#pragma once

#include <cstdint>
#include <string>

#include "mcx/core/communicator.h"
#include "mcx/core/peer_collectives.h"

namespace mcx {

class LaunchCheck {
 public:
  // what: the API for messages ("all_reduce", "process_allgather"); group: the group's description; process:
  // this process's job-wide index; mismatch_advice: the sentence that tells the user what to do.
  LaunchCheck(const LaunchTag& tag, int process, std::string what, std::string group, std::string mismatch_advice);
  LaunchCheck(const LaunchCheck&) = delete;
  LaunchCheck& operator=(const LaunchCheck&) = delete;

  const Piggyback* piggyback() const { return &piggyback_; }

  // The tag on the wire (fixed size, no padding).
  struct Wire {
    uint64_t fingerprint = 0;
    uint64_t sequence = 0;
    int32_t process = -1;
    char program[44] = {};
  };
  static_assert(sizeof(Wire) == 64);

 private:
  absl::Status compare() const;

  Wire mine_, theirs_;
  std::string what_, group_, advice_;
  Piggyback piggyback_;
};

}  // namespace mcx
