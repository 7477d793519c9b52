// LocalCommunicator: the Communicator (communicator.h) for members of one process, through shared
// memory. Members are threads (in the runtime: the streams of the devices in a replica group).
//
// Algorithm: members publish their buffers at a rendezvous; for reductions each member reduces its own
// 1/size slice of every input in rank order into a shared result (so the work is split, and the sum is
// the same bitwise on every member and run), then every member copies the result out; a second
// rendezvous keeps inputs alive until everyone has read them. Group size 1 copies.
//
// A LocalGroup (a CollectiveGroup, collective_group.h) is created once per set of members (the runtime caches
// them by device list) and hands out one Communicator per rank. Deadline and failure semantics are those of
// communicator.h and collective_group.h; members meet in a MemberRendezvous (member_rendezvous.h), whose
// DeadlineExceeded message lists the ranks that had not arrived. Argument mismatches between members (count,
// dtype, op, collective kind, a permutation whose sends and receives do not pair up) are InvalidArgument naming
// both sides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mcx/collectives/collective_group.h"

namespace mcx {

class LocalGroup final : public CollectiveGroup {
 public:
  // size >= 1; member_names[r] names rank r in messages (e.g. "cpu:3"); empty: "rank r".
  LocalGroup(int size, std::vector<std::string> member_names = {});
  ~LocalGroup() override;
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const override;
  // The communicator of rank r (owned by the group; valid while the group lives).
  Communicator& member(int rank) override;
  bool failed() const override;
  absl::Status failure() const override;
  void abort(const absl::Status& why) override;

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> members_;
};

}  // namespace mcx
