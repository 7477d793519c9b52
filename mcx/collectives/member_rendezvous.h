// MemberRendezvous: where the members of a group that live in this process meet for each collective: the
// shared-memory part of both in-process groups (LocalGroup, SpanningGroup; collective_group.h).
//
// A round: each member arrives with its CollectiveCall (or none, for a round that only synchronises); the last
// to arrive completes the round by running `complete` over everyone's calls, without the lock, while the
// others wait for it (without a deadline: the completer is bounded by its own); then every member of the round
// returns the completion's status.
//
// Failure (collective_group.h): a member that waits past its deadline fails the rendezvous for everyone,
// DeadlineExceeded "[<what>] <group>: deadline exceeded on <member> waiting for <missing> (k of n <noun> had not
// arrived)"; a failed completion, abort(why), or a non-OK `external_failure` (polled at each arrival and while
// waiting) fails it with that error. Members waiting when it fails return the first error if it was a
// DeadlineExceeded, else Aborted "[<what>] <group> is unusable after an earlier error: <first>" (payloads kept);
// later arrivals get the Aborted form, or with Options::repeat_deadline the DeadlineExceeded itself.
//
// The calls: arrive() stores the member's call under the lock; calls() may be read by the completer during
// completion, and by each member after a round until it arrives at the next one. Members that read the calls
// after a round therefore meet once more without publishing (LocalGroup's second phase) before anyone
// publishes new ones.
//
// Thread-safety: arrive is called by each member from its own thread; abort, failed, failure from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/collectives/collective_call.h"
#include "mcx/core/mutex.h"

namespace mcx {

class MemberRendezvous {
 public:
  struct Options {
    std::vector<std::string> names;  // the members meeting here, by index (for messages)
    std::string description;         // the group, for messages
    std::string noun = "members";    // what the members are called in a timeout: "members", "local members"
    // Polled at each arrival and while waiting: non-OK fails the rendezvous with it. May be empty.
    std::function<absl::Status()> external_failure;
    // After a deadline failed the rendezvous, later arrivals get that DeadlineExceeded (SpanningGroup: the late
    // member learns it was late) instead of the Aborted form (LocalGroup). Both are pinned by their tests.
    bool repeat_deadline = false;
  };
  using Complete = std::function<absl::Status(const std::vector<CollectiveCall>& calls)>;

  explicit MemberRendezvous(Options options);

  int size() const { return static_cast<int>(options_.names.size()); }
  const std::string& description() const { return options_.description; }
  const std::string& name(int index) const { return options_.names[index]; }

  // Member `index` arrives (publishing *call, when given); the last member runs `complete` (may be empty).
  absl::Status arrive(int index, const char* what, absl::Time deadline, const CollectiveCall* call,
                      const Complete& complete);
  // The calls published this round, by member index (see above for when they may be read).
  const std::vector<CollectiveCall>& calls() const { return calls_; }

  // OK, or what an arrival would return now that the rendezvous failed (for a group of one, which never meets).
  absl::Status usable(const char* what);
  void abort(const absl::Status& why);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  absl::Status failure() const;

  // The checks each group makes when a round is complete: every member passed the same arguments (kind, count,
  // dtype, op, shared), the count is >= 0, and a permutation's ranks lie in [-1, group_size). InvalidArgument
  // naming the members and their calls.
  absl::Status check_calls(const std::vector<CollectiveCall>& calls, const char* what, int group_size) const;

 private:
  absl::Status wait_for_round(int index, const char* what, absl::Time deadline, uint64_t round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK while usable; else what a member returns (`waiting`: it was waiting when the rendezvous failed).
  absl::Status unusable_locked(const char* what, bool waiting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void fail_locked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // Written by each member under mu_ when it arrives; read as described above (the round protocol, not the
  // mutex, keeps readers and writers apart).
  std::vector<CollectiveCall> calls_;
  mutable Mutex mu_;
  CondVar changed_;                                // a round ended or the rendezvous failed
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;       // completed rounds
  std::vector<bool> arrived_ ABSL_GUARDED_BY(mu_);  // in the round being collected
  int num_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status round_status_ ABSL_GUARDED_BY(mu_);  // of the last completed round
  absl::Status failure_ ABSL_GUARDED_BY(mu_);       // the first error
  std::atomic<bool> failed_{false};
};

}  // namespace mcx
