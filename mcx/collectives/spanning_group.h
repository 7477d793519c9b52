// SpanningGroup: the CollectiveGroup (collective_group.h) of devices spread over several processes.
//
// Hierarchical, so that one copy of the data crosses between a pair of processes: the local members of a
// collective meet in shared memory (member_rendezvous.h); the last to arrive runs the process-level part for all of them over the
// group's PeerGroup (peer_collectives.h) and writes every local member's result; then all return.
//  - all_reduce: local inputs reduced in group rank order, ring all-reduce between processes, result shared.
//  - all_gather: local blocks concatenated, ring all-gather between processes, blocks placed by group rank.
//  - reduce_scatter: the all_reduce above over all blocks, each member keeps its own.
//  - all_to_all, permute: one exchange between each pair of processes carrying every block between them.
//  - barrier: local meeting, then a process barrier.
// Every member gets bitwise identical results (the ring computes each element once and copies it).
// Deterministic mode (options.deterministic, MCX_DETERMINISTIC_REDUCTIONS=1): reductions gather every
// device's input instead and reduce in group rank order with reduce_into, which is exactly what a
// single-process LocalGroup computes, so results are bitwise identical to one process with the same device
// count whatever the process layout. It moves (members - 1) / (processes - 1) times more data.
//
// Launch check: set_launch(tag) tags the next collectives; the first exchange of each launch carries the tag
// to the ring successor, which compares it with its own before touching the data. Processes running
// different computations (or the same in another order) fail with FailedPrecondition naming both programs
// and both processes; the peer group is then aborted so the other processes fail fast too.
//
// Deadlines, failure, argument checks: as communicator.h and collective_group.h. A member that arrives after the others waited
// past their deadline gets their DeadlineExceeded (naming the local members that had not arrived); an error
// between processes (a dead peer: Unavailable naming its process) reaches every local member of the round.
// After any error the group has failed (failed() is true): its owner drops it and builds a new one.
// Thread-safety: each member's Communicator is used by one thread at a time (its device's stream).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mcx/collectives/collective_group.h"
#include "mcx/collectives/peer_group.h"

namespace mcx {

struct SpanningMember {
  int process = 0;   // job-wide process index
  bool local = false;  // hosted by this process
  std::string name;  // e.g. "cpu:3"
};

struct SpanningGroupOptions {
  bool deterministic = false;
};

class SpanningGroup final : public CollectiveGroup {
 public:
  // members: every device of the group in group rank order. peers: a PeerGroup over the distinct processes of
  // `members`, in increasing process index (its rank order). InvalidArgument if they do not match.
  static absl::StatusOr<std::unique_ptr<SpanningGroup>> create(std::vector<SpanningMember> members,
                                                               std::unique_ptr<PeerGroup> peers,
                                                               SpanningGroupOptions options = {});
  ~SpanningGroup() override;
  SpanningGroup(const SpanningGroup&) = delete;
  SpanningGroup& operator=(const SpanningGroup&) = delete;

  int size() const override;
  // The communicator of group rank r, which must be local (owned by the group).
  Communicator& member(int rank) override;
  // Also true once its peer group was aborted from elsewhere (the failure watch, a failed live_devices scope).
  bool failed() const override;
  absl::Status failure() const override;
  // Also aborts the peer group, so that the other processes' members fail promptly too.
  void abort(const absl::Status& why) override;

  struct State;

 private:
  SpanningGroup() = default;
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> members_;  // by group rank; null for remote members
};

}  // namespace mcx
