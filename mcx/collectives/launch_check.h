// LaunchCheck: the check that every process of a group is running the same thing at the same point, folded
// into the first exchange of a collective (a Piggyback, peer_collectives.h). Each process sends its LaunchTag
// (program name, fingerprint, sequence number) to its ring successor and compares the predecessor's with its
// own before the data behind it is used; around the ring, all agree or someone fails at once with
// FailedPrecondition naming both programs and both processes. The tag also carries the arguments of the
// collective that carries it ("all_reduce(count=1024, f32, sum)"), so that the same program reaching a
// collective with different sizes fails the same way instead of exchanging messages of different sizes. The spanning group checks each launch of a
// computation this way; the multihost utilities check each call (name and sequence).
// Thread-safety: one object per exchange, used by the thread running it. Not copyable (the piggyback points
// into it).
#pragma once

#include <cstdint>
#include <string>

#include "mcx/collectives/communicator.h"
#include "mcx/collectives/peer_collectives.h"

namespace mcx {

class LaunchCheck {
 public:
  // what: the API for messages ("all_reduce", "process_allgather"); group: the group's description; process:
  // this process's job-wide index; mismatch_advice: the sentence that tells the user what to do; call: the
  // arguments of the collective that carries the check, compared too ("" when they need no check).
  LaunchCheck(const LaunchTag& tag, int process, std::string what, std::string group, std::string mismatch_advice,
              const std::string& call = "");
  LaunchCheck(const LaunchCheck&) = delete;
  LaunchCheck& operator=(const LaunchCheck&) = delete;

  const Piggyback* piggyback() const { return &piggyback_; }

  // The tag on the wire (fixed size, no padding).
  struct Wire {
    uint64_t fingerprint = 0;
    uint64_t sequence = 0;
    uint64_t call_digest = 0;  // fnv1a64 of `call`
    int32_t process = -1;
    char program[48] = {};  // truncated names, for messages
    char call[52] = {};
  };
  static_assert(sizeof(Wire) == 128);

 private:
  absl::Status compare() const;

  Wire mine_, theirs_;
  std::string what_, group_, advice_;
  Piggyback piggyback_;
};

}  // namespace mcx
