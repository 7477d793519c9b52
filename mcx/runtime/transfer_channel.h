// Channels for transfers between processes that are not part of a computation (cross-process device_put):
// a PeerGroup over a fixed, ordered set of processes, named by a key every member derives from the transfer
// alone, connected through the data plane on first use and replaced (next generation, a fresh rendezvous)
// after a failure. Each transfer issued on a channel takes the next sequence number; every member issues
// the same transfers on the same key in the same order, so the numbers agree on all sides (the transfer's
// launch check carries and compares them, so transfers issued out of order fail naming both sides instead
// of mixing data).
//
// Use of the group: either one thread per side (the per-device-pair channels of cross_process_transfer.h run
// on the two devices' streams), or `in_turn`, which runs the transfers of one process in sequence order
// whatever threads they run on.
// Thread-safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/collectives/peer_group.h"

namespace mcx {

class TransferChannel;
struct PlannedTransfer {
  TransferChannel* channel;  // never destroyed (transfers run on the streams until exit)
  uint64_t sequence;
};

class TransferChannel {
 public:
  TransferChannel(std::string key, std::vector<int> processes) : key_(std::move(key)), processes_(std::move(processes)) {}

  // The group, connected on first use (every member connects concurrently); the connection error otherwise.
  absl::StatusOr<PeerGroup*> connect(absl::Time deadline);
  // Retires the group after a failed transfer: the next transfer connects a new generation. A retired group
  // is kept (a thread may still be inside it) until the process exits.
  void drop();
  // Waits until every transfer numbered below `sequence` on this channel finished here, runs fn(group),
  // and marks `sequence` finished (also when fn or the wait fails, or fn throws: Internal). DeadlineExceeded when the earlier ones do
  // not finish by `deadline`; the connection's error; fn's error (the group is then dropped).
  absl::Status in_turn(uint64_t sequence, absl::Time deadline, const std::function<absl::Status(PeerGroup&)>& fn);

 private:
  friend PlannedTransfer plan_transfer(const std::string& key, std::vector<int> processes);
  const std::string key_;
  const std::vector<int> processes_;
  std::mutex mu_;  // guards everything below
  std::condition_variable turn_cv_;
  std::unique_ptr<PeerGroup> group_;
  uint64_t generation_ = 0;
  uint64_t next_sequence_ = 0;  // transfers planned
  uint64_t finished_ = 0;       // in_turn: transfers below this number have finished here
  std::vector<std::unique_ptr<PeerGroup>> retired_;
};

// The channel named `key` over `processes` (ascending, this process among them; the same on every member for
// one key), created on first use, and the next sequence number on it.
PlannedTransfer plan_transfer(const std::string& key, std::vector<int> processes);

}  // namespace mcx
