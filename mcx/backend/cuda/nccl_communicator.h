// NcclCommunicator: one GPU's member of an NCCL communicator over the members of a host Communicator (the group
// the runtime built for a collective: collectives/communicator.h), so that the group's GPU arrays move device to
// device instead of through host staging (staged_spmd.h). It is attached to the host member
// (Communicator::attachment) and lives exactly as long as that group: when the group fails or a newer live set
// replaces it, the runtime builds a new group and the next collective a new NCCL communicator.
//
// Creation (NcclCommunicator::create) is itself a collective over the host communicator, called by every member at
// the same point (its first GPU collective): each member publishes whether it can run NCCL (the library loaded,
// its version, its GPU's UUID, its MCX_GPU_COLLECTIVES); every member then decides the same way: NCCL when all
// can, their NCCL versions agree and their GPUs are distinct (NCCL refuses two ranks on one GPU: processes
// sharing a GPU stay on staging), else staging with the reason. Rank 0 then makes the unique id and a second
// exchange over the same (already connected, authenticated) group hands it to everyone; each member initialises
// its communicator in non-blocking mode, polling its state against the deadline and the group's failure.
//
// Every collective is enqueued on the device's stream (in its order with the kernels) and waited for, polling
// the stream, ncclCommGetAsyncError, the host group's failure (the coordination service reporting a member
// process dead aborts it: collectives/peer_group.h) and the deadline (an NCCL remote error, which names no process,
// waits up to half a second for the host group's failure, which does). On any of these the communicator is aborted
// (ncclCommAbort, which never waits for peers), the host group is aborted too (so the other members stop), and
// the error is returned: Unavailable naming the dead process (its process-failure mark kept), DeadlineExceeded
// naming the collective, or NCCL's error. Afterwards every call returns Aborted "unusable after an earlier
// error". No flag is needed for any of this (JAX needs four XLA flags to cancel a collective).
//
// Reductions run in NCCL's order (a ring or tree), which is not the host path's rank order: results agree with
// the CPU within rounding, not bit for bit; MCX_DETERMINISTIC_REDUCTIONS=1 keeps reductions on staging.
//
// Thread-safety: each member is used by its device's thread only (as its host Communicator); the destructor may
// run on any thread.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/backend/cuda/nccl_api.h"
#include "mcx/collectives/communicator.h"
#include "mcx/core/dtype.h"
#include "mcx/core/reduce_op.h"

namespace mcx::cuda {

// MCX_GPU_COLLECTIVES: "auto" (NCCL where every member can run it, else staging), "nccl" (an error where it
// cannot), "staging" (always host staging).
absl::StatusOr<std::string> gpu_collectives_mode();

// NCCL's data type for a reduction of `dtype` with `op`, or nullopt where NCCL has none that computes what the
// host path does (int16; bool other than max/min).
std::optional<ncclDataType_t> nccl_reduction_type(DType dtype, ReduceOp op);

class NcclCommunicator {
 public:
  // The outcome of create(): a communicator, or none and why the group uses staging (the same on every member).
  struct Created {
    std::unique_ptr<NcclCommunicator> comm;
    std::string staging_reason;
  };
  // See above. Errors: the host exchanges' (their deadline, a dead process), FailedPrecondition when
  // MCX_GPU_COLLECTIVES=nccl and a member cannot run NCCL (naming which and why), NCCL's initialisation errors.
  static absl::StatusOr<Created> create(const CudaDevice& device, Communicator& host, absl::Time deadline);

  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Whether reductions run here: false when a member asked for deterministic reductions (then all_reduce and
  // reduce_scatter go through staging, in rank order, on every member).
  bool reductions() const { return reductions_; }
  // "NCCL 2.28.7 communicator of <host group>".
  std::string description() const;

  // Device addresses. out may equal in for all_reduce. Counts are elements of `type`.
  absl::Status all_reduce(uint64_t in, uint64_t out, int64_t count, ncclDataType_t type, ReduceOp op,
                          absl::Time deadline);
  // in: `bytes`; out: size() * bytes, rank r's block at r * bytes.
  absl::Status all_gather(uint64_t in, uint64_t out, int64_t bytes, absl::Time deadline);
  // in: size() * count; out: count = op over the ranks of block rank().
  absl::Status reduce_scatter(uint64_t in, uint64_t out, int64_t count, ncclDataType_t type, ReduceOp op,
                              absl::Time deadline);
  // in and out: size() * bytes; out block s = rank s's in block rank().
  absl::Status all_to_all(uint64_t in, uint64_t out, int64_t bytes, absl::Time deadline);
  // Sends `bytes` of in to send_to (-1: none), receives into out from recv_from (-1: out is left as it is).
  absl::Status permute(uint64_t in, uint64_t out, int64_t bytes, int send_to, int recv_from, absl::Time deadline);

 private:
  NcclCommunicator(const NcclApi& api, const CudaDevice& device, Communicator& host, int rank, int size)
      : api_(api), device_(device), host_(host), rank_(rank), size_(size) {}
  // Initialises comm_ from the unique id (non-blocking), waiting until it is ready.
  absl::Status init(const ncclUniqueId& id, absl::Time deadline);
  // Runs `enqueue` (NCCL calls on the device's stream) and waits until the stream finished it; see above.
  absl::Status run(const char* what, const std::function<ncclResult_t()>& enqueue, absl::Time deadline);
  // Waits until the communicator's state is no longer ncclInProgress.
  absl::Status settle(const char* what, absl::Time deadline);
  // OK while the host group is usable; else its failure (payloads kept) as an abort of `what`.
  absl::Status group_aborted(const char* what) const;
  // OK while the communicator and its host group are healthy; else the error that fails the wait.
  absl::Status health(const char* what) const;
  // Aborts the NCCL communicator and the host group with `why`, remembers it and returns it.
  absl::Status fail(const absl::Status& why);

  const NcclApi& api_;
  const CudaDevice& device_;
  Communicator& host_;
  const int rank_;
  const int size_;
  ncclComm_t comm_ = nullptr;
  bool reductions_ = true;
  bool aborted_ = false;
  absl::Status failure_;  // the first error; later calls fail with it
};

}  // namespace mcx::cuda
