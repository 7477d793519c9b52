// Communicator: collectives over a fixed group of ranks (docs/architecture.md, "Data plane").
//
// A Communicator is one member's handle on a group of `size()` ranks; rank r's handle is used by exactly
// one thread at a time (the stream of the device that is rank r). Every member of the group must call the
// same sequence of collectives with matching arguments (count, dtype, op); a mismatch is detected where
// the implementation can (the in-process one checks count/dtype/op and reports both sides) and is
// otherwise undefined. Group order is rank order: all_gather concatenates rank 0's block first.
//
// Deadlines: every call blocks until all members arrived and the data moved, or until `deadline`; a
// timeout is DeadlineExceeded naming the collective, the group and the ranks that did not arrive (never a
// silent hang). After a failed or timed-out call the group has failed (collective_group.h): every later call on
// any member returns the first error (Aborted), because the members can no longer agree on the sequence.
//
// Implementations: LocalCommunicator (local_communicator.h: devices of one process, shared memory) and the
// spanning group (spanning_group.h: devices of several processes; shared memory inside each process, one
// PeerGroup (peer_group.h) between them). Layering: this interface lives in the collectives layer, below the
// backend, the runtime and the distributed layer, so that the backend's collective kernels, the runtime and the
// data planes can all see it without including each other.
//
// Reductions are computed in a fixed order (rank 0 + rank 1 + ... ) so results are bitwise identical on
// every member and from run to run. Group size 1 is a copy (no synchronisation).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/buffer.h"
#include "mcx/core/dtype.h"
#include "mcx/core/reduce_op.h"

namespace mcx {

// The computation that the collectives which follow belong to. The runtime tags each launch over a mesh that
// spans processes, so that processes running different computations (or the same ones in another order)
// fail at the first exchange with an error naming both, instead of hanging or mixing data.
struct LaunchTag {
  std::string program;       // e.g. "jit(train_step)"
  uint64_t fingerprint = 0;  // of the per-device program
  uint64_t sequence = 0;     // launches on this mesh before this one (the same on every process)
};

class Communicator {
 public:
  // Destroys the attachments in reverse order of attaching.
  virtual ~Communicator();

  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Human-readable group description for error messages, e.g. "local group {cpu:0,cpu:1}".
  virtual std::string description() const = 0;

  // in/out hold `count` elements of dtype; out may alias in. out = op over all ranks' in, elementwise.
  virtual absl::Status all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                                  absl::Time deadline) = 0;
  // all_reduce into a new buffer of `dims` that the implementation may share, read-only, between the
  // members (in one process: one result for the whole group instead of a copy per member). The caller
  // must never write to the returned storage. Default: allocates a buffer and calls all_reduce.
  virtual absl::StatusOr<Buffer> all_reduce_shared(const void* in, const std::vector<int64_t>& dims, DType dtype,
                                                   ReduceOp op, absl::Time deadline);
  // all_gather into a new buffer of `dims` (size()*bytes bytes of `dtype`, rank r's block at offset
  // r*bytes) that the implementation may share, read-only, between the members. Default: allocates a
  // buffer and calls all_gather.
  virtual absl::StatusOr<Buffer> all_gather_shared(const void* in, int64_t bytes, const std::vector<int64_t>& dims,
                                                   DType dtype, absl::Time deadline);
  // in holds `bytes` bytes; out holds size()*bytes: rank r's block at offset r*bytes.
  virtual absl::Status all_gather(const void* in, void* out, int64_t bytes, absl::Time deadline) = 0;
  // in holds size()*count elements; out (count elements) = op over all ranks of block rank() of in.
  virtual absl::Status reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                                      absl::Time deadline) = 0;
  // in and out hold size()*bytes: out block s = rank s's in block rank().
  virtual absl::Status all_to_all(const void* in, void* out, int64_t bytes, absl::Time deadline) = 0;
  // Point-to-point exchange in one step: sends `bytes` of in to rank send_to (or nothing if -1) and
  // receives `bytes` into out from rank recv_from (or leaves out untouched if -1). All members call it
  // together (it is a collective: a permutation of the group).
  virtual absl::Status permute(const void* in, void* out, int64_t bytes, int send_to, int recv_from,
                               absl::Time deadline) = 0;
  virtual absl::Status barrier(absl::Time deadline) = 0;
  // Tags the collectives that follow (see LaunchTag). Default: ignored (in one process the streams run what
  // was enqueued, in order, and a mismatch is caught by the argument check).
  virtual void set_launch(const LaunchTag& tag) { (void)tag; }
  // Runs the launch check of the current launch now, unless a collective of this member already carried it: a
  // platform that moves a launch's data outside this communicator (a GPU library's communicator over the same
  // members) calls it before its first collective of each launch, so that processes running different
  // computations still fail naming both. All members call it at the same point. Default: OK (no launch check).
  virtual absl::Status check_launch(absl::Time deadline) {
    (void)deadline;
    return absl::OkStatus();
  }

  // The group's first error once it has failed (collective_group.h), including a failure of the processes it
  // spans reported from elsewhere; OK while usable. Polled by work that waits outside this communicator.
  // Thread-safe.
  virtual absl::Status group_failure() const { return absl::OkStatus(); }
  // Fails the whole group (CollectiveGroup::abort): its members, here and in the other processes, stop waiting
  // with `why`. Thread-safe.
  virtual void abort_group(const absl::Status& why) { (void)why; }

  // State another layer derives from this member and keeps exactly as long as the group (a GPU library's
  // communicator over the same members): the object attached under `key`, or, the first time, what `make`
  // returns, attached (an error is returned and nothing is attached). Only the member's thread calls it.
  // Attachments are destroyed with the communicator (their destructors must not call it).
  template <typename T>
  absl::StatusOr<T*> attachment(const std::string& key, const std::function<absl::StatusOr<std::unique_ptr<T>>()>& make) {
    auto it = attachments_.find(key);
    if (it != attachments_.end()) return static_cast<T*>(it->second.get());
    absl::StatusOr<std::unique_ptr<T>> made = make();
    if (!made.ok()) return made.status();
    T* raw = made->get();
    attachments_.emplace(key, std::shared_ptr<void>(std::move(*made)));
    attach_order_.push_back(key);
    return raw;
  }

 private:
  std::map<std::string, std::shared_ptr<void>> attachments_;
  std::vector<std::string> attach_order_;
};

}  // namespace mcx
