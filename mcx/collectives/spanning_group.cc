#include "mcx/collectives/spanning_group.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/collectives/collective_call.h"
#include "mcx/collectives/launch_check.h"
#include "mcx/collectives/member_rendezvous.h"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/collectives/reduce_kernels.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"
#include "mcx/core/profiler.h"

namespace mcx {
namespace {

using Kind = CollectiveKind;
using Call = CollectiveCall;

}  // namespace

struct SpanningGroup::State {
  std::vector<SpanningMember> members;                // by group rank
  std::vector<int> local_ranks;                       // group ranks of the local members, ascending
  std::vector<int> local_index;                       // group rank -> index into local_ranks, or -1
  std::vector<int> processes;                         // peer rank -> process index (ascending)
  std::vector<int> peer_of;                           // group rank -> peer rank
  std::vector<std::vector<int>> ranks_of_peer;        // peer rank -> its group ranks, ascending
  std::unique_ptr<PeerGroup> peers;
  SpanningGroupOptions options;
  std::unique_ptr<MemberRendezvous> meeting;          // the local members, by local index

  Mutex launch_mu;
  std::vector<LaunchTag> launch ABSL_GUARDED_BY(launch_mu);  // by local index: the latest set_launch

  // Used only by the member that completes a round (rounds are sequential).
  uint64_t rounds = 0;
  bool launch_checked = false;
  uint64_t checked_sequence = 0;
  std::vector<char> scratch, gathered;

  int nlocal() const { return static_cast<int>(local_ranks.size()); }
  int size() const { return static_cast<int>(members.size()); }
  // The calls of the round being completed, by local index.
  const std::vector<Call>& calls() const { return meeting->calls(); }

  std::string description() const {
    std::vector<std::string> n;
    for (const SpanningMember& m : members) n.push_back(m.name);
    return absl::StrCat("group {", absl::StrJoin(n, ","), "} over processes {", absl::StrJoin(processes, ","), "}");
  }

  // The group between processes was aborted (a member process failed, as the coordination service reported):
  // no collective of this group can complete, so the local members stop waiting for each other, even for one
  // that will never arrive (its own task failed before reaching the collective).
  absl::Status peer_failure() const {
    if (!peers->failed()) return absl::OkStatus();
    absl::Status why = peers->failure();
    return why.ok() ? absl::AbortedError("[data plane] the group between processes was aborted") : why;
  }

  // The group's first error: the local meeting's, else the peer group's.
  absl::Status failure() const {
    absl::Status first = meeting->failure();
    return first.ok() ? peer_failure() : first;
  }
  void abort(const absl::Status& why) {
    meeting->abort(why);
    peers->abort(why);
  }

  // One collective: this member publishes its call; the last local member to arrive executes the round for
  // all of them (the others wait and do not touch the state); everyone returns its outcome.
  absl::Status run(int local, const Call& call, const char* what, absl::Time deadline) {
    profiler::Scope traced("collective", what);
    if (traced.recording()) traced.arg("call", call.to_string()).arg("group", description()).arg("member", int64_t{local});
    // The completion captures two pointers, so that its std::function holds it inline (no allocation per call).
    const struct {
      int local;
      const char* what;
      absl::Time deadline;
    } round{local, what, deadline};
    return meeting->arrive(local, what, deadline, &call, [this, &round](const std::vector<Call>& calls) {
      LaunchTag tag;
      {
        MutexLock lock(&launch_mu);
        tag = launch[round.local];
      }
      absl::Status st = meeting->check_calls(calls, round.what, size());
      if (st.ok()) st = execute(round.what, tag, round.deadline);
      if (!st.ok()) peers->abort(st);  // the other processes fail fast instead of waiting for us
      return st;
    });
  }

  // --- the process-level part of each collective (run by one member for all local ones) ---

  absl::Status execute(const char* what, const LaunchTag& tag, absl::Time deadline) {
    const Call& c0 = calls()[0];
    profiler::Scope traced("collective", what, " between processes");
    if (traced.recording()) {
      traced.arg("processes", static_cast<int64_t>(peers->size())).arg("local members", static_cast<int64_t>(calls().size()));
      if (!tag.program.empty()) traced.arg("launch", tag.program);
    }
    const uint64_t base = (rounds++) * kPeerTagSpan;
    std::optional<LaunchCheck> check;
    const Piggyback* pb = nullptr;
    if (!tag.program.empty() && (!launch_checked || tag.sequence != checked_sequence)) {
      launch_checked = true;
      checked_sequence = tag.sequence;
      check.emplace(tag, processes[peers->rank()], what, description(),
                    "every process must launch the same computations over a mesh in the same order (the sequence "
                    "number counts the launches on that mesh)",
                    c0.group_arguments());
      pb = check->piggyback();
    }
    switch (c0.kind) {
      case Kind::kAllReduce: return all_reduce(base, deadline, pb, /*scatter=*/false);
      case Kind::kReduceScatter: return all_reduce(base, deadline, pb, /*scatter=*/true);
      case Kind::kAllGather: return all_gather(base, deadline, pb);
      case Kind::kAllToAll: return all_to_all(base, deadline, pb);
      case Kind::kPermute: return permute(base, deadline, pb);
      case Kind::kBarrier: return peer_barrier(*peers, base, deadline, pb);
    }
    return absl::InternalError("[spanning group] unknown collective");
  }

  // all_reduce of `count` elements per member, or reduce_scatter (inputs of size()*count elements, member r
  // keeps block r). Result in `scratch` first, then copied to every local member.
  absl::Status all_reduce(uint64_t tag, absl::Time deadline, const Piggyback* pb, bool scatter) {
    const Call& c0 = calls()[0];
    const int64_t w = static_cast<int64_t>(dtype_size(c0.dtype));
    const int64_t n = scatter ? c0.count * size() : c0.count;
    scratch.resize(static_cast<size_t>(n * w));
    if (options.deterministic) {
      // Every device's input, in (process, local) order, then reduced in group rank order.
      std::vector<int64_t> sizes;
      for (const auto& ranks : ranks_of_peer) sizes.push_back(static_cast<int64_t>(ranks.size()) * n * w);
      std::vector<char> mine(static_cast<size_t>(nlocal() * n * w));
      for (int i = 0; i < nlocal(); ++i) std::memcpy(mine.data() + i * n * w, calls()[i].in, static_cast<size_t>(n * w));
      int64_t total = 0;
      for (int64_t s : sizes) total += s;
      gathered.resize(static_cast<size_t>(total));
      MCX_RETURN_IF_ERROR(peer_all_gatherv(*peers, mine.data(), sizes, gathered.data(), tag, deadline, pb));
      std::vector<const char*> ins(size());
      int64_t offset = 0;
      for (const auto& ranks : ranks_of_peer) {
        for (int r : ranks) {
          ins[r] = gathered.data() + offset;
          offset += n * w;
        }
      }
      if (scatter) {
        for (int i = 0; i < nlocal(); ++i) {
          const int r = local_ranks[i];
          reduce_into(c0.dtype, ins, c0.count * r, c0.count, c0.op, static_cast<char*>(calls()[i].out));
        }
        return absl::OkStatus();
      }
      reduce_into(c0.dtype, ins, 0, n, c0.op, scratch.data());
    } else if (nlocal() == 1 && !scatter) {
      // One device here: run the ring in the output itself (no scratch copy in or out).
      if (calls()[0].out != calls()[0].in) std::memcpy(calls()[0].out, calls()[0].in, static_cast<size_t>(n * w));
      return peer_all_reduce(*peers, calls()[0].out, n, c0.dtype, c0.op, tag, deadline, pb);
    } else {
      std::vector<const char*> ins;
      for (int i = 0; i < nlocal(); ++i) ins.push_back(static_cast<const char*>(calls()[i].in));
      reduce_into(c0.dtype, ins, 0, n, c0.op, scratch.data());
      MCX_RETURN_IF_ERROR(peer_all_reduce(*peers, scratch.data(), n, c0.dtype, c0.op, tag, deadline, pb));
    }
    for (int i = 0; i < nlocal(); ++i) {
      const int64_t off = scatter ? c0.count * local_ranks[i] * w : 0;
      const int64_t bytes = scatter ? c0.count * w : n * w;
      std::memcpy(calls()[i].out, scratch.data() + off, static_cast<size_t>(bytes));
    }
    return absl::OkStatus();
  }

  absl::Status all_gather(uint64_t tag, absl::Time deadline, const Piggyback* pb) {
    const int64_t b = calls()[0].count;
    std::vector<int64_t> sizes;
    for (const auto& ranks : ranks_of_peer) sizes.push_back(static_cast<int64_t>(ranks.size()) * b);
    // Blocks arrive in (process, local) order; outputs want group rank order.
    std::vector<int64_t> position(size());
    int64_t k = 0;
    bool in_rank_order = true;
    for (const auto& ranks : ranks_of_peer) {
      for (int r : ranks) {
        in_rank_order = in_rank_order && r == k;
        position[r] = k++;
      }
    }
    if (nlocal() == 1 && in_rank_order) {  // gather straight into the one output
      return peer_all_gatherv(*peers, calls()[0].in, sizes, calls()[0].out, tag, deadline, pb);
    }
    std::vector<char> mine(static_cast<size_t>(nlocal() * b));
    for (int i = 0; i < nlocal(); ++i) std::memcpy(mine.data() + i * b, calls()[i].in, static_cast<size_t>(b));
    gathered.resize(static_cast<size_t>(size() * b));
    MCX_RETURN_IF_ERROR(peer_all_gatherv(*peers, mine.data(), sizes, gathered.data(), tag, deadline, pb));
    for (int i = 0; i < nlocal(); ++i) {
      char* out = static_cast<char*>(calls()[i].out);
      for (int r = 0; r < size(); ++r) std::memcpy(out + r * b, gathered.data() + position[r] * b, static_cast<size_t>(b));
    }
    return absl::OkStatus();
  }

  // Member m's block t goes to member t's block m. Between two processes one message carries every block from
  // the sender's members to the receiver's members, ordered by (source rank, destination rank).
  absl::Status all_to_all(uint64_t tag, absl::Time deadline, const Piggyback* pb) {
    const int64_t b = calls()[0].count;
    const int me = peers->rank();
    std::vector<std::vector<char>> out_msgs(processes.size()), in_msgs(processes.size());
    std::vector<PeerGroup::Send> sends;
    std::vector<PeerGroup::Recv> recvs;
    for (int q = 0; q < static_cast<int>(processes.size()); ++q) {
      if (q == me) continue;
      const int64_t bytes = static_cast<int64_t>(ranks_of_peer[me].size() * ranks_of_peer[q].size()) * b;
      out_msgs[q].resize(static_cast<size_t>(bytes));
      in_msgs[q].resize(static_cast<size_t>(bytes));
      int64_t k = 0;
      for (int m : ranks_of_peer[me]) {
        for (int t : ranks_of_peer[q]) {
          std::memcpy(out_msgs[q].data() + k * b, static_cast<const char*>(calls()[local_index[m]].in) + t * b,
                      static_cast<size_t>(b));
          ++k;
        }
      }
      sends.push_back({q, tag, out_msgs[q].data(), bytes});
      recvs.push_back({q, tag, in_msgs[q].data(), bytes});
    }
    // Local blocks first (through a copy: out may alias in).
    std::vector<char> local(static_cast<size_t>(nlocal() * nlocal() * b));
    for (int i = 0; i < nlocal(); ++i) {
      for (int j = 0; j < nlocal(); ++j) {
        std::memcpy(local.data() + (i * nlocal() + j) * b,
                    static_cast<const char*>(calls()[i].in) + local_ranks[j] * b, static_cast<size_t>(b));
      }
    }
    MCX_RETURN_IF_ERROR(peer_exchange(*peers, std::move(sends), std::move(recvs), tag, deadline, pb));
    for (int i = 0; i < nlocal(); ++i) {
      for (int j = 0; j < nlocal(); ++j) {
        std::memcpy(static_cast<char*>(calls()[j].out) + local_ranks[i] * b, local.data() + (i * nlocal() + j) * b,
                    static_cast<size_t>(b));
      }
    }
    for (int q = 0; q < static_cast<int>(processes.size()); ++q) {
      if (q == me) continue;
      int64_t k = 0;
      for (int m : ranks_of_peer[q]) {
        for (int t : ranks_of_peer[me]) {
          std::memcpy(static_cast<char*>(calls()[local_index[t]].out) + m * b, in_msgs[q].data() + k * b,
                      static_cast<size_t>(b));
          ++k;
        }
      }
    }
    return absl::OkStatus();
  }

  // Every local member's (send_to, recv_from) is known here; a remote member's is not, but both sides order
  // the blocks between two processes by the receiving member's rank, which each side can compute: the sender
  // from its members' send_to, the receiver from its members' recv_from.
  absl::Status permute(uint64_t tag, absl::Time deadline, const Piggyback* pb) {
    const int64_t b = calls()[0].count;
    const int me = peers->rank();
    std::map<int, std::vector<std::pair<int, int>>> to, from;  // peer -> (receiving rank, local index)
    for (int i = 0; i < nlocal(); ++i) {
      const Call& c = calls()[i];
      if (c.send_to >= 0 && peer_of[c.send_to] != me) to[peer_of[c.send_to]].push_back({c.send_to, i});
      if (c.recv_from >= 0 && peer_of[c.recv_from] != me) from[peer_of[c.recv_from]].push_back({local_ranks[i], i});
    }
    std::map<int, std::vector<char>> out_msgs, in_msgs;
    std::vector<PeerGroup::Send> sends;
    std::vector<PeerGroup::Recv> recvs;
    for (auto& [q, list] : to) {
      std::sort(list.begin(), list.end());
      std::vector<char>& msg = out_msgs[q];
      msg.resize(list.size() * static_cast<size_t>(b));
      for (size_t k = 0; k < list.size(); ++k) {
        std::memcpy(msg.data() + k * b, calls()[list[k].second].in, static_cast<size_t>(b));
      }
      sends.push_back({q, tag, msg.data(), static_cast<int64_t>(msg.size())});
    }
    for (auto& [q, list] : from) {
      std::sort(list.begin(), list.end());
      std::vector<char>& msg = in_msgs[q];
      msg.resize(list.size() * static_cast<size_t>(b));
      recvs.push_back({q, tag, msg.data(), static_cast<int64_t>(msg.size())});
    }
    // Local pairs through a copy (out may alias in).
    std::vector<std::pair<int, std::vector<char>>> local;
    for (int i = 0; i < nlocal(); ++i) {
      const int src = calls()[i].recv_from;
      if (src >= 0 && peer_of[src] == me) {
        const char* in = static_cast<const char*>(calls()[local_index[src]].in);
        local.push_back({i, std::vector<char>(in, in + b)});
      }
    }
    MCX_RETURN_IF_ERROR(peer_exchange(*peers, std::move(sends), std::move(recvs), tag, deadline, pb));
    for (auto& [i, data] : local) std::memcpy(calls()[i].out, data.data(), static_cast<size_t>(b));
    for (auto& [q, list] : from) {
      for (size_t k = 0; k < list.size(); ++k) {
        std::memcpy(calls()[list[k].second].out, in_msgs[q].data() + k * b, static_cast<size_t>(b));
      }
    }
    return absl::OkStatus();
  }
};

namespace {

class SpanningCommunicator final : public Communicator {
 public:
  SpanningCommunicator(std::shared_ptr<SpanningGroup::State> s, int rank)
      : s_(std::move(s)), rank_(rank), local_(s_->local_index[rank]) {}

  int size() const override { return s_->size(); }
  int rank() const override { return rank_; }
  std::string description() const override { return s_->description(); }

  absl::Status all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                          absl::Time deadline) override {
    return run(Kind::kAllReduce, count, dtype, op, in, out, deadline);
  }
  absl::Status all_gather(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    return run(Kind::kAllGather, bytes, DType::kUInt8, ReduceOp::kSum, in, out, deadline);
  }
  absl::Status reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                              absl::Time deadline) override {
    return run(Kind::kReduceScatter, count, dtype, op, in, out, deadline);
  }
  absl::Status all_to_all(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    return run(Kind::kAllToAll, bytes, DType::kUInt8, ReduceOp::kSum, in, out, deadline);
  }
  absl::Status permute(const void* in, void* out, int64_t bytes, int send_to, int recv_from,
                       absl::Time deadline) override {
    return run(Kind::kPermute, bytes, DType::kUInt8, ReduceOp::kSum, in, out, deadline, send_to, recv_from);
  }
  absl::Status barrier(absl::Time deadline) override {
    return run(Kind::kBarrier, 0, DType::kUInt8, ReduceOp::kSum, nullptr, nullptr, deadline);
  }
  void set_launch(const LaunchTag& tag) override {
    MutexLock lock(&s_->launch_mu);
    s_->launch[local_] = tag;
  }
  // A barrier carries the check (execute: the first exchange of each launch does).
  absl::Status check_launch(absl::Time deadline) override {
    LaunchTag tag;
    {
      MutexLock lock(&s_->launch_mu);
      tag = s_->launch[local_];
    }
    if (tag.program.empty() || (launch_checked_ && tag.sequence == checked_sequence_)) return absl::OkStatus();
    MCX_RETURN_IF_ERROR(barrier(deadline));
    launch_checked_ = true;
    checked_sequence_ = tag.sequence;
    return absl::OkStatus();
  }
  absl::Status group_failure() const override { return s_->failure(); }
  void abort_group(const absl::Status& why) override { s_->abort(why); }

 private:
  absl::Status run(Kind kind, int64_t count, DType dtype, ReduceOp op, const void* in, void* out, absl::Time deadline,
                   int send_to = -1, int recv_from = -1) {
    Call c;
    c.kind = kind;
    c.count = count;
    c.dtype = dtype;
    c.op = op;
    c.send_to = send_to;
    c.recv_from = recv_from;
    c.in = in;
    c.out = out;
    return s_->run(local_, c, collective_kind_name(kind), deadline);
  }

  std::shared_ptr<SpanningGroup::State> s_;
  int rank_;
  int local_;
  // The last launch this member checked through check_launch (only its thread reads them).
  bool launch_checked_ = false;
  uint64_t checked_sequence_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SpanningGroup>> SpanningGroup::create(std::vector<SpanningMember> members,
                                                                     std::unique_ptr<PeerGroup> peers,
                                                                     SpanningGroupOptions options) {
  if (members.empty() || peers == nullptr) {
    return absl::InvalidArgumentError("[spanning group] needs at least one member and a peer group");
  }
  auto s = std::make_shared<State>();
  for (const SpanningMember& m : members) s->processes.push_back(m.process);
  std::sort(s->processes.begin(), s->processes.end());
  s->processes.erase(std::unique(s->processes.begin(), s->processes.end()), s->processes.end());
  if (peers->size() != static_cast<int>(s->processes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("[spanning group] the members live on ", s->processes.size(),
                                                   " processes but the peer group has ", peers->size()));
  }
  s->ranks_of_peer.resize(s->processes.size());
  for (size_t r = 0; r < members.size(); ++r) {
    const int q = static_cast<int>(std::lower_bound(s->processes.begin(), s->processes.end(), members[r].process) -
                                   s->processes.begin());
    s->peer_of.push_back(q);
    s->ranks_of_peer[q].push_back(static_cast<int>(r));
    s->local_index.push_back(members[r].local ? static_cast<int>(s->local_ranks.size()) : -1);
    if (members[r].local) s->local_ranks.push_back(static_cast<int>(r));
  }
  if (s->local_ranks.empty()) {
    return absl::InvalidArgumentError("[spanning group] none of the members is local to this process");
  }
  for (int r : s->local_ranks) {
    if (s->peer_of[r] != peers->rank()) {
      return absl::InvalidArgumentError(absl::StrCat("[spanning group] local member ", members[r].name,
                                                     " is not on the peer group's own process"));
    }
  }
  s->members = std::move(members);
  s->peers = std::move(peers);
  s->options = options;
  MemberRendezvous::Options meeting;
  for (int r : s->local_ranks) meeting.names.push_back(s->members[r].name);
  meeting.description = s->description();
  meeting.noun = "local members";
  meeting.repeat_deadline = true;
  meeting.external_failure = [state = s.get()] { return state->peer_failure(); };
  s->meeting = std::make_unique<MemberRendezvous>(std::move(meeting));
  {
    MutexLock lock(&s->launch_mu);
    s->launch.resize(s->local_ranks.size());
  }
  std::unique_ptr<SpanningGroup> g(new SpanningGroup());
  g->state_ = s;
  g->members_.resize(s->members.size());
  for (int r : s->local_ranks) g->members_[r] = std::make_unique<SpanningCommunicator>(s, r);
  return g;
}

SpanningGroup::~SpanningGroup() = default;

int SpanningGroup::size() const { return state_->size(); }

Communicator& SpanningGroup::member(int rank) { return *members_.at(rank); }

bool SpanningGroup::failed() const { return state_->meeting->failed() || state_->peers->failed(); }

absl::Status SpanningGroup::failure() const { return state_->failure(); }

void SpanningGroup::abort(const absl::Status& why) { state_->abort(why); }

}  // namespace mcx
