// PeerGroup: point-to-point messages between the processes of one group. It is the transport under every
// collective that spans processes (spanning_group.h builds the device-level Communicator on it; the
// algorithms are in peer_collectives.h). Implementations, in the distributed layer's data planes: mcx's own
// authenticated TCP/TLS transport (distributed/data_plane/tcp, the default), Gloo over TCP
// (distributed/data_plane/gloo, MCX_COLLECTIVES=gloo) and MPI (distributed/data_plane/mpi, MCX_COLLECTIVES=mpi
// under mpirun).
//
// Layering: the interface and the factory registry live in the collectives layer so that the runtime can create
// process-spanning communicators without linking the distributed layer, which installs the factory at
// mcx::distributed::initialize() (docs/architecture.md, "Data plane").
//
// Contract:
//  - rank() is this process's position in the ordered process list of the group; peers are named by rank.
//  - exchange() posts every send and receive at once and blocks until all completed, so rings and pairwise
//    exchanges cannot deadlock on each other. Messages are matched by (peer, tag); one exchange holds at
//    most one send and one receive per (peer, tag). A message may be shorter than the receive posted for
//    it (the receive completes, the rest of its buffer is left as it was); zero-byte operations are
//    skipped (both sides skip them, since both know the sizes). A message longer than its receive is a fatal
//    error in Gloo (an exception on its I/O thread ends the process), so where sizes depend on what a peer
//    runs, agree on them first (the piggyback of peer_collectives.h does). Receives are waited in the
//    order given, and `on_recv(i)` runs as soon as receive i has completed: a non-OK result ends the
//    exchange with that status (the launch check in spanning_group.h reads a header this way before the
//    data behind it).
//  - Deadlines: exchange fails with DeadlineExceeded at `deadline`, naming the peers (and their processes)
//    that had not completed. A peer whose connection closed (it died) is Unavailable naming its process.
//    Third-party exceptions never escape: they become a Status naming the operation and the peer.
//  - After any error the group has failed: every later exchange fails at once with the first error
//    (Aborted, peer_group_unusable). Its owner drops it and may build a new one (a new generation).
//  - abort(why) may be called from any thread: a blocked exchange returns `why` promptly, and the group
//    has failed. (An exchange whose messages had all arrived when the abort came may still complete: what a peer
//    sent just before it died is delivered.)
// Thread-safety: exchange is called by one thread at a time; abort, size, rank, description from any.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx {

class PeerGroup {
 public:
  struct Send {
    int peer;
    uint64_t tag;
    const void* data;
    int64_t bytes;
  };
  struct Recv {
    int peer;
    uint64_t tag;
    void* data;
    int64_t bytes;
  };
  using OnRecv = std::function<absl::Status(size_t index)>;

  virtual ~PeerGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // For messages, e.g. "gloo group 'mesh 0,1,2,3' of processes {0,1}".
  virtual std::string description() const = 0;

  virtual absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                                const OnRecv& on_recv = nullptr) = 0;
  virtual void abort(const absl::Status& why) = 0;
  // Whether the group has failed: an exchange failed or abort() was called. Groups made by make_peer_group
  // track it (so a group aborted from another thread reads as failed before anyone used it); a bare
  // implementation may answer false.
  virtual bool failed() const { return false; }
  // The first error of a failed group (the abort reason or the failed exchange's error); OK while healthy, and
  // for bare implementations that do not track it.
  virtual absl::Status failure() const { return absl::OkStatus(); }
  // The host of each rank as a dense index (rank 0's host is 0, the others numbered in order of first
  // appearance), from the job's topology (core/topology.h); empty when unknown (a bare implementation, no
  // topology). Collectives use it to keep traffic within a host before it crosses hosts (peer_collectives.h). A view
  // of the group's own list (every collective looks at it: no copy per call).
  virtual std::span<const int> hosts() const { return {}; }
};

// What a factory is asked to build. Every member process makes the same request (same processes, key,
// live set, generation) and the factory connects them; `deadline` bounds connecting. The rendezvous is
// keyed by (key, live_set, generation), so groups of different live sets or rebuilds never meet.
struct PeerGroupRequest {
  std::vector<int> processes;  // job-wide process indices, ordered; includes this process
  std::string key;             // names the group in the job, e.g. "devices 0,1,2,3"
  uint64_t generation = 0;     // a rebuilt group gets a new generation (a fresh rendezvous)
  absl::Time deadline = absl::InfiniteFuture();
  uint64_t live_set = 0;       // the live set's generation it was built under (collectives/live_set.h); 0: none
};

using PeerGroupFactory = std::function<absl::StatusOr<std::unique_ptr<PeerGroup>>(const PeerGroupRequest&)>;

// Installs the factory of the data plane ("gloo", "mpi", ...); an empty factory uninstalls it.
void set_peer_group_factory(std::string backend, PeerGroupFactory factory);

// Builds a group through the installed factory. The failure of a member process reported by the coordination
// service (collectives/live_set.h), marked as that process's failure, at once instead of waiting for it to connect;
// FailedPrecondition when no factory is installed (the process did not call mcx::distributed::initialize),
// naming the processes the group needed.
absl::StatusOr<std::unique_ptr<PeerGroup>> make_peer_group(const PeerGroupRequest& request);

// Aborts (PeerGroup::abort(why)) every live group built by make_peer_group that includes job-wide process
// `process`, so that collectives waiting for a process the coordination service reported dead fail at once
// instead of at their deadline; the distributed layer calls it from its membership watch. `why` should be
// marked with mark_process_failure (error.h). Returns how many groups it aborted. Thread-safe.
int abort_peer_groups_of_process(int process, const absl::Status& why);

// The installed backend's name, or "" when none is installed.
std::string peer_group_backend();

// What a failed group answers every later exchange with: Aborted "[data plane] <description> is unusable after
// an earlier error: <first error>", keeping the first error's payloads (its process-failure mark).
absl::Status peer_group_unusable(const std::string& description, const absl::Status& first_error);

}  // namespace mcx
