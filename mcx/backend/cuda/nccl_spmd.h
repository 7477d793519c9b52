// The collectives of a CUDA program device to device (nccl_communicator.h), where the group and the op allow:
// the first choice of the plan's SPMD steps, host staging (staged_spmd.h) the fallback.
//
// An op goes through NCCL when its group's members agreed on an NCCL communicator (created at the group's first
// such op, a collective itself) and its blocks are contiguous: all_reduce of a dtype NCCL reduces as mcx does
// (not int16; bool only for max/min), all_gather and reduce_scatter along a dimension with nothing but 1s
// before it, all_to_all whose split and concat blocks are both contiguous, and every collective_permute. What
// decides is the same on every member (the op, its dims, the group's agreement), so all members take the same
// path. A group of one (and a permute that moves nothing) is a copy on the device, with no host round trip.
// Before its first NCCL op of each launch a member runs the launch check over the host group
// (Communicator::check_launch), so processes running different computations still fail naming both.
//
// Errors: those of spmd_member (host_spmd_ops.h) and of NcclCommunicator (a dead process, the deadline, NCCL's
// errors), prefixed with the op. Thread-safety: as the executable (one execution per device thread).
#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/backend/cuda/staged_spmd.h"
#include "mcx/ir/program.h"
#include "mcx/platform/execution_context.h"
#include "mcx/platform/host_spmd_ops.h"

namespace mcx::cuda {

// Runs instr (a collective; `member` its spmd_member) on the device and returns true, or returns false, having
// done nothing the other members depend on, when the op must go through host staging (run_staged_spmd_op with
// the same member).
absl::StatusOr<bool> run_spmd_op_on_device(const ir::Instr& instr, const CudaDevice& device, const SpmdMember& member,
                                           const StagedValue& operand, const StagedValue& out,
                                           const ExecutionContext* ctx, absl::Time deadline);

}  // namespace mcx::cuda
