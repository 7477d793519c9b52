#include "mcx/runtime/transfer_channel.h"

#include <algorithm>
#include <exception>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mcx {
namespace {

struct Channels {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<TransferChannel>> by_key;
};

Channels& channels() {
  static Channels* c = new Channels();  // never destroyed: streams transfer until exit
  return *c;
}

}  // namespace

PlannedTransfer plan_transfer(const std::string& key, std::vector<int> processes) {
  Channels& c = channels();
  TransferChannel* ch = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    std::unique_ptr<TransferChannel>& slot = c.by_key[key];
    if (!slot) slot = std::make_unique<TransferChannel>(key, std::move(processes));
    ch = slot.get();
  }
  std::lock_guard<std::mutex> lock(ch->mu_);
  return PlannedTransfer{ch, ch->next_sequence_++};
}

absl::StatusOr<PeerGroup*> TransferChannel::connect(absl::Time deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!group_) {
    PeerGroupRequest request{processes_, key_, generation_, deadline};
    absl::StatusOr<std::unique_ptr<PeerGroup>> g = make_peer_group(request);
    if (!g.ok()) return g.status();
    group_ = *std::move(g);
  }
  return group_.get();
}

void TransferChannel::drop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (group_) retired_.push_back(std::move(group_));
  ++generation_;
}

absl::Status TransferChannel::in_turn(uint64_t sequence, absl::Time deadline,
                                      const std::function<absl::Status(PeerGroup&)>& fn) {
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = std::max(finished_, sequence + 1);
    turn_cv_.notify_all();
  };
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool turn = turn_cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return finished_ >= sequence; });
    if (!turn) {
      lock.unlock();
      finish();
      return absl::DeadlineExceededError(absl::StrCat("[", key_, "] transfer ", sequence, " waited past its deadline for ",
                                                      "transfer ", finished_, " of this process to finish"));
    }
  }
  absl::StatusOr<PeerGroup*> g = connect(deadline);
  absl::Status st = g.status();
  if (g.ok()) {
    try {
      st = fn(**g);
    } catch (const std::exception& e) {  // (e.g. std::bad_alloc): a Status, and the turn still ends
      st = absl::InternalError(absl::StrCat("[", key_, "] transfer ", sequence, " threw: ", e.what()));
    }
  }
  if (!st.ok()) drop();
  finish();
  return st;
}

}  // namespace mcx
