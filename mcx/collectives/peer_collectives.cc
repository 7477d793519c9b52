#include "mcx/collectives/peer_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <set>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/collectives/reduce_kernels.h"
#include "mcx/core/profiler.h"

namespace mcx {
namespace {

int successor(const PeerGroup& g) { return (g.rank() + 1) % g.size(); }
int predecessor(const PeerGroup& g) { return (g.rank() + g.size() - 1) % g.size(); }

// One exchange of a ring step (a send to the successor, a receive from the predecessor), with the piggyback
// in front when this is the collective's first step.
absl::Status ring_step(PeerGroup& g, uint64_t tag, const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes,
                       absl::Time deadline, const Piggyback* piggyback) {
  std::vector<PeerGroup::Send> sends;
  std::vector<PeerGroup::Recv> recvs;
  sends.push_back({successor(g), tag, send, send_bytes});
  recvs.push_back({predecessor(g), tag, recv, recv_bytes});
  return peer_exchange(g, std::move(sends), std::move(recvs), tag, deadline, piggyback);
}

// Some ranks of a group as a group of their own: rank i here is ranks[i] there (the host leaders' ring).
class PeerSubgroup final : public PeerGroup {
 public:
  PeerSubgroup(PeerGroup& parent, std::vector<int> ranks) : parent_(parent), ranks_(std::move(ranks)) {
    rank_ = static_cast<int>(std::find(ranks_.begin(), ranks_.end(), parent.rank()) - ranks_.begin());
  }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int rank() const override { return rank_; }
  std::string description() const override { return parent_.description(); }
  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    std::vector<Send> s(sends.begin(), sends.end());
    std::vector<Recv> r(recvs.begin(), recvs.end());
    for (Send& x : s) x.peer = ranks_[static_cast<size_t>(x.peer)];
    for (Recv& x : r) x.peer = ranks_[static_cast<size_t>(x.peer)];
    return parent_.exchange(s, r, deadline, on_recv);
  }
  void abort(const absl::Status& why) override { parent_.abort(why); }

 private:
  PeerGroup& parent_;
  const std::vector<int> ranks_;
  int rank_ = 0;
};

// Ring reduce-scatter then ring all-gather over the whole group (peer_collectives.h).
absl::Status ring_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                             absl::Time deadline, const Piggyback* piggyback);

// Recursive doubling (peer_collectives.h): for small messages, where the ring's 2 (P - 1) steps cost more than
// sending the whole buffer log2 P times.
absl::Status doubling_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                                 absl::Time deadline, const Piggyback* piggyback);

// The ranks of each host, hosts in order of their lowest rank (the host's leader): set when the group knows its
// hosts and they are neither one nor one per rank, and the tags of the hierarchy fit the collective's span.
std::optional<std::vector<std::vector<int>>> host_members(const PeerGroup& g) {
  const std::span<const int> hosts = g.hosts();
  if (static_cast<int>(hosts.size()) != g.size()) return std::nullopt;
  // One host (the common case of a small job) or one process per host: no allocation on every collective.
  if (std::all_of(hosts.begin(), hosts.end(), [&](int h) { return h == hosts[0]; })) return std::nullopt;
  if (*std::max_element(hosts.begin(), hosts.end()) + 1 == g.size()) return std::nullopt;
  std::vector<std::vector<int>> members;
  for (int r = 0; r < g.size(); ++r) {
    const size_t h = static_cast<size_t>(hosts[static_cast<size_t>(r)]);
    if (h >= members.size()) members.resize(h + 1);
    members[h].push_back(r);
  }
  const int count = static_cast<int>(members.size());
  if (count <= 1 || count >= g.size() || 2 * count + 2 >= static_cast<int>(kPeerTagSpan)) return std::nullopt;
  std::sort(members.begin(), members.end());  // by leader (each list is sorted, so its first rank is its lowest)
  return members;
}

// Reduce within each host along a chain to its leader (the last member sends to the one before it, which adds its
// own and passes on), a ring all-reduce among the leaders (the only traffic between hosts: each host sends and
// receives 2 (H - 1) / H of the data, however many processes it has), then every leader sends the result to its
// host's other members. Tags: tag (the piggyback's header exchange, first, with the whole group's ring), tag + 1
// (the chain), tag + 2 .. tag + 2H - 1 (the leaders' ring; their recursive doubling, for small messages, needs
// fewer: tag + 2 .. tag + 3 + log2 H), tag + 2H (the broadcast).
absl::Status hierarchical_all_reduce(PeerGroup& g, const std::vector<std::vector<int>>& members, void* data,
                                     int64_t count, DType dtype, ReduceOp op, uint64_t tag, absl::Time deadline,
                                     const Piggyback* piggyback) {
  if (piggyback != nullptr) MCX_RETURN_IF_ERROR(peer_exchange(g, {}, {}, tag, deadline, piggyback));
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  const std::vector<int>* mine = nullptr;
  std::vector<int> leaders;
  for (const std::vector<int>& host : members) {
    leaders.push_back(host.front());
    if (std::find(host.begin(), host.end(), g.rank()) != host.end()) mine = &host;
  }
  const size_t at = static_cast<size_t>(std::find(mine->begin(), mine->end(), g.rank()) - mine->begin());
  thread_local std::vector<char> incoming;
  if (at + 1 < mine->size()) {  // the member after this one passes its partial sum on
    incoming.resize(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    const PeerGroup::Recv recv{(*mine)[at + 1], tag + 1, incoming.data(), bytes};
    MCX_RETURN_IF_ERROR(g.exchange({}, std::span<const PeerGroup::Recv>(&recv, 1), deadline));
    accumulate(dtype, op, static_cast<char*>(data), incoming.data(), count);
  }
  const uint64_t broadcast_tag = tag + 2 * static_cast<uint64_t>(leaders.size());
  if (at > 0) {
    const PeerGroup::Send send{(*mine)[at - 1], tag + 1, data, bytes};
    MCX_RETURN_IF_ERROR(g.exchange(std::span<const PeerGroup::Send>(&send, 1), {}, deadline));
    const PeerGroup::Recv result{mine->front(), broadcast_tag, data, bytes};
    return g.exchange({}, std::span<const PeerGroup::Recv>(&result, 1), deadline);
  }
  PeerSubgroup hosts(g, leaders);
  MCX_RETURN_IF_ERROR(bytes <= kDoublingAllReduceMaxBytes
                          ? doubling_all_reduce(hosts, data, count, dtype, op, tag + 2, deadline, nullptr)
                          : ring_all_reduce(hosts, data, count, dtype, op, tag + 2, deadline, nullptr));
  std::vector<PeerGroup::Send> results;
  for (size_t k = 1; k < mine->size(); ++k) results.push_back({(*mine)[k], broadcast_tag, data, bytes});
  return g.exchange(results, {}, deadline);
}

}  // namespace

absl::Status peer_exchange(PeerGroup& g, std::vector<PeerGroup::Send> sends, std::vector<PeerGroup::Recv> recvs,
                           uint64_t tag, absl::Time deadline, const Piggyback* piggyback) {
  if (piggyback == nullptr || g.size() == 1) return g.exchange(sends, recvs, deadline);
  const uint64_t htag = tag + kPeerTagSpan - 1;
  const int next = successor(g), prev = predecessor(g);
  const int64_t pb = piggyback->bytes;
  const int64_t ring_bytes = pb + kPiggybackFoldBytes;
  // Phase 1, the headers. The ring header goes to the successor and comes from the predecessor whatever the
  // data pattern (so that a mismatch is always seen) and carries the first bytes of the data for the
  // successor. Its receive is posted at the largest size it can have (so that two processes that disagree
  // can never send one a longer message than it expects; a shorter one is fine). Every other peer this
  // exchange sends to or receives from gets or sends a header of its own.
  thread_local std::vector<char> out_ring, in_ring;
  thread_local std::vector<std::vector<char>> in_other;
  out_ring.resize(static_cast<size_t>(ring_bytes));
  in_ring.resize(static_cast<size_t>(ring_bytes));
  std::memcpy(out_ring.data(), piggyback->out, static_cast<size_t>(pb));
  std::vector<PeerGroup::Send> header_sends{{next, htag, out_ring.data(), pb}};
  std::vector<PeerGroup::Recv> header_recvs{{prev, htag, in_ring.data(), ring_bytes}};
  std::set<int> sent_to{next}, heard_from{prev};
  bool folded_send = false;
  for (PeerGroup::Send& s : sends) {
    if (s.peer == next && !folded_send && s.bytes > 0) {
      folded_send = true;
      const int64_t fold = std::min(s.bytes, kPiggybackFoldBytes);
      std::memcpy(out_ring.data() + pb, s.data, static_cast<size_t>(fold));
      header_sends[0].bytes = pb + fold;
      s.data = static_cast<const char*>(s.data) + fold;
      s.bytes -= fold;
    } else if (sent_to.insert(s.peer).second) {
      header_sends.push_back({s.peer, htag, piggyback->out, pb});
    }
  }
  char* fold_dest = nullptr;
  int64_t fold_bytes = 0;
  in_other.resize(recvs.size());
  for (size_t i = 0; i < recvs.size(); ++i) {
    PeerGroup::Recv& r = recvs[i];
    if (r.peer == prev && fold_dest == nullptr && r.bytes > 0) {
      fold_bytes = std::min(r.bytes, kPiggybackFoldBytes);
      fold_dest = static_cast<char*>(r.data);
      r.data = fold_dest + fold_bytes;
      r.bytes -= fold_bytes;
    } else if (heard_from.insert(r.peer).second) {
      in_other[i].resize(static_cast<size_t>(pb));
      header_recvs.push_back({r.peer, htag, in_other[i].data(), pb});
    }
  }
  MCX_RETURN_IF_ERROR(g.exchange(header_sends, header_recvs, deadline, [&](size_t i) -> absl::Status {
    std::memcpy(piggyback->in, header_recvs[i].data, static_cast<size_t>(pb));
    if (piggyback->check) MCX_RETURN_IF_ERROR(piggyback->check());
    if (i == 0 && fold_bytes > 0) std::memcpy(fold_dest, in_ring.data() + pb, static_cast<size_t>(fold_bytes));
    return absl::OkStatus();
  }));
  // Phase 2, the rest of the data, posted only now that every peer it comes from has passed the check (a
  // peer running something else could otherwise send a message larger than the receive posted for it).
  return g.exchange(sends, recvs, deadline);
}

absl::Status peer_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                             absl::Time deadline, const Piggyback* piggyback) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  profiler::Scope traced("collective", "all-reduce algorithm");
  if (traced.recording()) traced.arg("bytes", bytes).arg("processes", static_cast<int64_t>(g.size()));
  if (std::optional<std::vector<std::vector<int>>> members = host_members(g)) {
    traced.arg("algorithm", "hierarchical (within hosts, then between them)");
    return hierarchical_all_reduce(g, *members, data, count, dtype, op, tag, deadline, piggyback);
  }
  if (bytes <= kDoublingAllReduceMaxBytes) {
    traced.arg("algorithm", "recursive doubling");
    return doubling_all_reduce(g, data, count, dtype, op, tag, deadline, piggyback);
  }
  traced.arg("algorithm", "ring (reduce-scatter, all-gather)");
  return ring_all_reduce(g, data, count, dtype, op, tag, deadline, piggyback);
}

namespace {

absl::Status doubling_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                                 absl::Time deadline, const Piggyback* piggyback) {
  const int p = g.size();
  if (p == 1) return absl::OkStatus();
  const int r = g.rank();
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  int core = 1, steps = 0;  // the largest power of two <= p: ranks [core, p) fold into ranks [0, p - core) first
  while (core * 2 <= p) {
    core *= 2;
    ++steps;
  }
  const int extra = p - core;
  thread_local std::vector<char> incoming;
  incoming.resize(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  char* const mine = static_cast<char*>(data);
  // Fold-in (tag): rank core + i sends its data to rank i, which adds it. Every rank takes part in this first
  // exchange, even with nothing to move, when it carries the piggyback (its headers go around the whole ring).
  {
    std::vector<PeerGroup::Send> sends;
    std::vector<PeerGroup::Recv> recvs;
    if (r >= core) sends.push_back({r - core, tag, mine, bytes});
    if (r < extra) recvs.push_back({r + core, tag, incoming.data(), bytes});
    if (piggyback != nullptr || !sends.empty() || !recvs.empty()) {
      MCX_RETURN_IF_ERROR(peer_exchange(g, std::move(sends), std::move(recvs), tag, deadline, piggyback));
    }
    if (r < extra) accumulate(dtype, op, mine, incoming.data(), count);
  }
  // Step k (tag + 1 + k): exchange everything with rank r ^ 2^k and combine, the lower rank's partial result
  // first: both partners compute the same operation on the same operands (the same bits, even where an op is not
  // bitwise commutative: the max of +0 and -0, NaN payloads), so after the last step every rank of the core holds
  // the same bits.
  for (int k = 0; r < core && k < steps; ++k) {
    const int partner = r ^ (1 << k);
    const uint64_t step_tag = tag + 1 + static_cast<uint64_t>(k);
    const PeerGroup::Send send{partner, step_tag, mine, bytes};
    const PeerGroup::Recv recv{partner, step_tag, incoming.data(), bytes};
    MCX_RETURN_IF_ERROR(g.exchange(std::span<const PeerGroup::Send>(&send, 1),
                                   std::span<const PeerGroup::Recv>(&recv, 1), deadline));
    if (partner > r) {
      accumulate(dtype, op, mine, incoming.data(), count);
    } else {
      accumulate_left(dtype, op, mine, incoming.data(), count);
    }
  }
  // Fold-out (tag + 1 + steps): rank i sends the result back to rank core + i.
  const uint64_t out_tag = tag + 1 + static_cast<uint64_t>(steps);
  if (r < extra) {
    const PeerGroup::Send send{r + core, out_tag, mine, bytes};
    return g.exchange(std::span<const PeerGroup::Send>(&send, 1), {}, deadline);
  }
  if (r >= core) {
    const PeerGroup::Recv recv{r - core, out_tag, mine, bytes};
    return g.exchange({}, std::span<const PeerGroup::Recv>(&recv, 1), deadline);
  }
  return absl::OkStatus();
}

absl::Status ring_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                             absl::Time deadline, const Piggyback* piggyback) {
  const int p = g.size();
  if (p == 1) return absl::OkStatus();
  const int r = g.rank();
  const int64_t w = static_cast<int64_t>(dtype_size(dtype));
  auto begin = [&](int c) { return count * c / p; };
  auto chunk = [&](int c) { return begin(c + 1) - begin(c); };
  char* base = static_cast<char*>(data);
  int64_t largest = 0;
  for (int c = 0; c < p; ++c) largest = std::max(largest, chunk(c));
  // Reused per thread (each device stream keeps its own, as large as its largest chunk so far): a fresh
  // allocation per call is page-faulted in again every time (measured: 64 MiB all-reduce 319 ms vs 65 ms for
  // Gloo's, which keeps its buffers). Uninitialised: every byte is received before it is read.
  thread_local std::unique_ptr<char[]> scratch;
  thread_local size_t scratch_bytes = 0;
  const size_t need = static_cast<size_t>(std::max<int64_t>(1, largest * w));
  if (scratch_bytes < need) {
    scratch.reset(new char[need]);
    scratch_bytes = need;
  }
  char* const incoming = scratch.get();
  uint64_t step_tag = tag;
  // The tags after the steps' own 2(p - 1) carry the pieces of the reduce-scatter steps: max_pieces a step,
  // within the collective's span (its last tag is the piggyback's; the hierarchy starts this ring 2 tags in).
  const int64_t piece_tags = static_cast<int64_t>(kPeerTagSpan) - 4 - 2 * (p - 1);
  const int64_t max_pieces = std::min<int64_t>(64, std::max<int64_t>(1, piece_tags / (p - 1)));
  const uint64_t piece_tag0 = tag + 2 * static_cast<uint64_t>(p - 1);
  // Both sides cut a chunk into the same pieces (its element count alone decides), one message and tag each.
  auto pieces_of = [&](int64_t elements) {
    return std::clamp<int64_t>(elements * w / kReducePieceBytes, 1, max_pieces);
  };
  auto piece_begin = [](int64_t elements, int64_t n, int64_t k) { return elements * k / n; };
  // Reduce-scatter: at step s, send chunk (r - s) and receive chunk (r - s - 1), accumulating into it.
  for (int s = 0; s < p - 1; ++s) {
    const int cs = ((r - s) % p + p) % p;
    const int cr = ((r - s - 1) % p + p) % p;
    const uint64_t this_tag = step_tag++;
    if (s == 0 && piggyback != nullptr) {  // the launch check's header leads the first step: whole chunks
      absl::Status st = ring_step(g, this_tag, base + begin(cs) * w, chunk(cs) * w, incoming, chunk(cr) * w,
                                  deadline, piggyback);
      if (!st.ok()) return st;
      accumulate(dtype, op, base + begin(cr) * w, incoming, chunk(cr));
      continue;
    }
    const int64_t ns = pieces_of(chunk(cs)), nr = pieces_of(chunk(cr));
    const uint64_t tag0 = nr == 1 && ns == 1 ? this_tag : piece_tag0 + static_cast<uint64_t>(s) * max_pieces;
    std::vector<PeerGroup::Send> sends;
    std::vector<PeerGroup::Recv> recvs;
    for (int64_t k = 0; k < ns; ++k) {
      const int64_t b = piece_begin(chunk(cs), ns, k), e = piece_begin(chunk(cs), ns, k + 1);
      sends.push_back({successor(g), tag0 + k, base + (begin(cs) + b) * w, (e - b) * w});
    }
    for (int64_t k = 0; k < nr; ++k) {
      const int64_t b = piece_begin(chunk(cr), nr, k), e = piece_begin(chunk(cr), nr, k + 1);
      recvs.push_back({predecessor(g), tag0 + k, incoming + b * w, (e - b) * w});
    }
    char* const into = base + begin(cr) * w;
    absl::Status st = g.exchange(sends, recvs, deadline, [&](size_t k) {
      const int64_t b = piece_begin(chunk(cr), nr, static_cast<int64_t>(k));
      const int64_t e = piece_begin(chunk(cr), nr, static_cast<int64_t>(k) + 1);
      accumulate(dtype, op, into + b * w, incoming + b * w, e - b);
      return absl::OkStatus();
    });
    if (!st.ok()) return st;
  }
  // Now chunk (r + 1) is complete here. All-gather: at step s, pass chunk (r + 1 - s) on, receive (r - s).
  for (int s = 0; s < p - 1; ++s) {
    const int cs = ((r + 1 - s) % p + p) % p;
    const int cr = ((r - s) % p + p) % p;
    absl::Status st = ring_step(g, step_tag++, base + begin(cs) * w, chunk(cs) * w, base + begin(cr) * w,
                                chunk(cr) * w, deadline, nullptr);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status peer_all_gatherv(PeerGroup& g, const void* in, std::span<const int64_t> sizes, void* out, uint64_t tag,
                              absl::Time deadline, const Piggyback* piggyback) {
  const int p = g.size();
  const int r = g.rank();
  std::vector<int64_t> offset(p + 1, 0);
  for (int i = 0; i < p; ++i) offset[i + 1] = offset[i] + sizes[i];
  char* o = static_cast<char*>(out);
  if (sizes[r] > 0 && o + offset[r] != in) std::memmove(o + offset[r], in, static_cast<size_t>(sizes[r]));
  if ((p & (p - 1)) == 0) {
    // Recursive doubling: before step k this rank holds the blocks of the 2^k ranks that share its bits above k,
    // a contiguous range of `out`; it sends that range to rank r ^ 2^k and receives the partner's, which
    // doubles it.
    for (int k = 0; (1 << k) < p; ++k) {
      const int mine = r >> k << k, theirs = (r ^ (1 << k)) >> k << k, span = 1 << k;
      std::vector<PeerGroup::Send> sends{{r ^ (1 << k), tag + static_cast<uint64_t>(k), o + offset[mine],
                                          offset[mine + span] - offset[mine]}};
      std::vector<PeerGroup::Recv> recvs{{r ^ (1 << k), tag + static_cast<uint64_t>(k), o + offset[theirs],
                                          offset[theirs + span] - offset[theirs]}};
      MCX_RETURN_IF_ERROR(peer_exchange(g, std::move(sends), std::move(recvs), tag + static_cast<uint64_t>(k),
                                        deadline, k == 0 ? piggyback : nullptr));
    }
    return absl::OkStatus();
  }
  // At step s, pass block (r - s) on and receive block (r - s - 1).
  for (int s = 0; s < p - 1; ++s) {
    const int bs = ((r - s) % p + p) % p;
    const int br = ((r - s - 1) % p + p) % p;
    absl::Status st = ring_step(g, tag + s, o + offset[bs], sizes[bs], o + offset[br], sizes[br], deadline,
                                s == 0 ? piggyback : nullptr);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status peer_barrier(PeerGroup& g, uint64_t tag, absl::Time deadline, const Piggyback* piggyback) {
  const int p = g.size();
  if (p == 1) return absl::OkStatus();
  const int r = g.rank();
  // Dissemination: at round k, a byte to rank r + 2^k and one from rank r - 2^k. After round k each rank has
  // heard, directly or through others, from the 2^(k+1) - 1 ranks before it; after ceil(log2 P) rounds from all.
  char out = 1, in = 0;
  uint64_t round_tag = tag;
  for (int distance = 1; distance < p; distance *= 2, ++round_tag) {
    std::vector<PeerGroup::Send> sends{{(r + distance) % p, round_tag, &out, 1}};
    std::vector<PeerGroup::Recv> recvs{{(r - distance + p) % p, round_tag, &in, 1}};
    MCX_RETURN_IF_ERROR(peer_exchange(g, std::move(sends), std::move(recvs), round_tag, deadline,
                                      distance == 1 ? piggyback : nullptr));
  }
  return absl::OkStatus();
}

}  // namespace mcx
