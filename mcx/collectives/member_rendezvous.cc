#include "mcx/collectives/member_rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/collectives/collective_group.h"

namespace mcx {

MemberRendezvous::MemberRendezvous(Options options) : options_(std::move(options)) {
  calls_.resize(options_.names.size());
  arrived_.assign(options_.names.size(), false);
}

absl::Status MemberRendezvous::arrive(int index, const char* what, absl::Time deadline, const CollectiveCall* call,
                                      const Complete& complete) {
  {
    MutexLock lock(&mu_);
    if (absl::Status s = unusable_locked(what, /*waiting=*/false); !s.ok()) return s;
    if (call != nullptr) calls_[index] = *call;
    arrived_[index] = true;
    if (++num_arrived_ < size()) return wait_for_round(index, what, deadline, rounds_);
  }
  // The last member: the others wait for this completion and touch nothing meanwhile.
  const absl::Status status = complete ? complete(calls_) : absl::OkStatus();
  MutexLock lock(&mu_);
  if (!status.ok()) fail_locked(status);
  round_status_ = status;
  std::fill(arrived_.begin(), arrived_.end(), false);
  num_arrived_ = 0;
  ++rounds_;
  changed_.signal_all();
  return status;
}

absl::Status MemberRendezvous::wait_for_round(int index, const char* what, absl::Time deadline, uint64_t round) {
  while (rounds_ == round) {
    if (num_arrived_ == size()) {  // being completed: bounded by the completer's own deadline
      changed_.wait_for(&mu_, absl::Seconds(1));
      continue;
    }
    if (absl::Status s = unusable_locked(what, /*waiting=*/true); !s.ok()) return s;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::vector<std::string> missing;
      for (int i = 0; i < size(); ++i) {
        if (!arrived_[i]) missing.push_back(name(i));
      }
      fail_locked(absl::DeadlineExceededError(
          absl::StrCat("[", what, "] ", description(), ": deadline exceeded on ", name(index), " waiting for ",
                       absl::StrJoin(missing, ", "), " (", missing.size(), " of ", size(), " ", options_.noun,
                       " had not arrived)")));
      return failure_;
    }
    // Bounded slices: an infinite deadline never reaches the chrono conversion, and external failures are polled.
    changed_.wait_for(&mu_, std::min(left, absl::Seconds(1)));
  }
  return round_status_;
}

absl::Status MemberRendezvous::unusable_locked(const char* what, bool waiting) {
  if (failure_.ok() && options_.external_failure) {
    if (absl::Status external = options_.external_failure(); !external.ok()) fail_locked(external);
  }
  if (failure_.ok()) return absl::OkStatus();
  const bool deadline = failure_.code() == absl::StatusCode::kDeadlineExceeded;
  if (deadline && (waiting || options_.repeat_deadline)) return failure_;
  return group_unusable(what, description(), failure_);
}

void MemberRendezvous::fail_locked(const absl::Status& why) {
  if (failure_.ok()) failure_ = why.ok() ? absl::AbortedError(absl::StrCat(description(), " was aborted")) : why;
  failed_.store(true, std::memory_order_release);
  changed_.signal_all();
}

absl::Status MemberRendezvous::usable(const char* what) {
  MutexLock lock(&mu_);
  return unusable_locked(what, /*waiting=*/false);
}

void MemberRendezvous::abort(const absl::Status& why) {
  MutexLock lock(&mu_);
  fail_locked(why);
}

absl::Status MemberRendezvous::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

absl::Status MemberRendezvous::check_calls(const std::vector<CollectiveCall>& calls, const char* what,
                                           int group_size) const {
  for (int i = 1; i < size(); ++i) {
    if (!calls[i].agrees_with(calls[0])) {
      return absl::InvalidArgumentError(absl::StrCat("[", what, "] arguments differ between members of ",
                                                     description(), ": ", name(0), " called ", calls[0].to_string(),
                                                     ", ", name(i), " called ", calls[i].to_string()));
    }
  }
  if (calls[0].count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("[", what, "] count is ", calls[0].count, ", expected >= 0"));
  }
  if (calls[0].kind != CollectiveKind::kPermute) return absl::OkStatus();
  for (int i = 0; i < size(); ++i) {
    const CollectiveCall& c = calls[i];
    if (c.send_to < -1 || c.send_to >= group_size || c.recv_from < -1 || c.recv_from >= group_size) {
      return absl::InvalidArgumentError(absl::StrCat("[permute] ", name(i), " of ", description(), " called ",
                                                     c.to_string(), ", expected ranks in [-1, ", group_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mcx
