// Collectives among the processes of a PeerGroup (one participant per process), over host memory. The
// spanning group (spanning_group.h) runs them on behalf of all the devices of a process, so that one copy
// of the data crosses between a pair of processes.
//
// Algorithms (P processes, ring order = rank order, successor (r + 1) % P):
//  - peer_all_reduce: ring reduce-scatter then ring all-gather, P - 1 steps each, every step one exchange
//    (send a chunk to the successor, receive one from the predecessor). Chunk c (elements
//    [count*c/P, count*(c+1)/P)) is reduced along the ring starting at process c + 1 and ending at process c,
//    acc = acc op incoming, and is then copied unchanged to every process: all members hold bitwise identical
//    results. The order differs from rank order; the deterministic mode of the spanning group reduces in
//    rank order instead (reduce_kernels.h).
//    Up to kDoublingAllReduceMaxBytes it is recursive doubling instead (latency-bound sizes: log2 P steps
//    instead of 2 (P - 1)): with C the largest power of two <= P, rank C + i first sends its data to rank i;
//    at step k every rank r < C exchanges its whole partial result with rank r ^ 2^k and combines the two, the
//    lower rank's first (both partners compute the same bits); rank i then sends the result to rank C + i.
//    Bitwise identical on every member too.
//    When the group knows its members' hosts (PeerGroup::hosts()) and some host has several of them, it is
//    hierarchical instead: a chain within each host reduces to the host's leader (its lowest rank), the
//    leaders run the ring above among themselves (recursive doubling for small messages), and each leader
//    sends the result to its host's members. Only
//    the leaders' ring crosses hosts: each host sends (and receives) 2 (H - 1) / H of the data once, where the
//    flat ring sends 2 (P - 1) / P of it over every edge between hosts (and with the ranks of a host spread
//    around the ring, over every edge). Still bitwise identical on every member.
//  - peer_all_gatherv: block p (sizes[p] bytes) lands at the sum of the sizes before it. When P is a power of two,
//    recursive doubling: log2 P exchanges, at step k of the 2^k blocks a rank holds (a contiguous range) with rank
//    r ^ 2^k; it moves the same bytes as a ring in fewer steps, so it is used at every size (measured on 4
//    processes: 4 KiB 73 -> 35 us, 1 MiB per process 1.6 -> 0.9 ms, 64 MiB 86-144 -> 83-84 ms). Otherwise a ring
//    of P - 1 steps.
//  - peer_barrier: dissemination, ceil(log2 P) rounds of one byte to rank r + 2^k and from rank r - 2^k (after
//    it, every process has heard, directly or through others, from every other).
// Tags: a collective uses tags [tag, tag + kPeerTagSpan); callers give each collective its own range.
// Piggyback: a few bytes (a LaunchCheck tag) carried by the collective's first exchange and checked before
// any data behind it is used or even received. The first exchange runs in two phases: (1) the headers, a
// message to the ring successor and from the predecessor that also carries the first kPiggybackFoldBytes
// of the data for the successor, received into a buffer of the largest size it can have (plus a bare header
// to and from any other peer of the exchange); every received header is checked; (2) the rest of the data,
// posted only after its sender passed the check. A small collective thus pays for its piggyback with a copy,
// not a message, and processes that run different things never send a message longer than the receive
// posted for it (PeerGroup: Gloo cannot survive one).
// Errors and deadlines: those of PeerGroup::exchange. Thread-safety: as PeerGroup (one caller at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/collectives/communicator.h"
#include "mcx/collectives/peer_group.h"

namespace mcx {

inline constexpr uint64_t kPeerTagSpan = 4096;
inline constexpr int64_t kPiggybackFoldBytes = 32 << 10;
// All-reduces of at most this many bytes use recursive doubling: on 2 and 4 processes of one host it was faster
// than the ring up to 256 KiB and slower from 512 KiB (docs/benchmarks.md).
inline constexpr int64_t kDoublingAllReduceMaxBytes = 256 << 10;
// A ring all-reduce's reduce-scatter step moves its chunk in pieces of about this size (at most 64, one tag
// each), each accumulated as soon as it has arrived, while the next is on its way, instead of after the whole
// chunk. On 2 processes of one host: 16 MiB 6.1-6.6 ms against 6.9-8.1 whole, 64 MiB 25-30 against 31-37;
// 256 KiB pieces were slower than whole chunks (13 ms at 16 MiB).
inline constexpr int64_t kReducePieceBytes = 1 << 20;

struct Piggyback {
  const void* out = nullptr;  // sent to the ring successor
  void* in = nullptr;         // received from the predecessor
  int64_t bytes = 0;
  std::function<absl::Status()> check;  // runs once `in` has arrived, before the data is used
};

absl::Status peer_all_reduce(PeerGroup& g, void* data, int64_t count, DType dtype, ReduceOp op, uint64_t tag,
                             absl::Time deadline, const Piggyback* piggyback = nullptr);

// in holds sizes[g.rank()] bytes; out holds the sum of sizes.
absl::Status peer_all_gatherv(PeerGroup& g, const void* in, std::span<const int64_t> sizes, void* out, uint64_t tag,
                              absl::Time deadline, const Piggyback* piggyback = nullptr);

absl::Status peer_barrier(PeerGroup& g, uint64_t tag, absl::Time deadline, const Piggyback* piggyback = nullptr);

// One exchange with the piggyback folded in (for collectives whose pattern is not a ring: all-to-all,
// permutations). The piggyback still goes to the ring successor and comes from the predecessor.
absl::Status peer_exchange(PeerGroup& g, std::vector<PeerGroup::Send> sends, std::vector<PeerGroup::Recv> recvs,
                           uint64_t tag, absl::Time deadline, const Piggyback* piggyback = nullptr);

}  // namespace mcx
