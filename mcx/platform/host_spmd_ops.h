// The SPMD ops (ir op.h, opset 2: all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute,
// axis_index) on operands in host memory, whatever the platform: the CPU runs them on its buffers, a device
// platform on host copies of its operands (staging: docs/gpu.md). One implementation, so every platform's
// collectives agree bit for bit on the same communicator.
//
// A collective finds the replica group holding ctx->partition_id, asks ctx->communicator(group) for this
// member's Communicator and calls it with ctx->deadline. collective_permute's group is every partition
// 0..N-1. Along a non-leading dimension the operand is first packed into contiguous per-member blocks
// (and received blocks unpacked), because communicators move flat byte ranges. A group of size 1 needs
// no communicator (the op is a copy). Without a context the program is partition 0 of 1.
//
// Errors (the message starts with "[op_name] "): FailedPrecondition when a group larger than 1 runs
// without a context or without a communicator factory; InvalidArgument when the replica groups do not
// cover ctx->num_partitions, a permute pair names a partition >= num_partitions, or the communicator's
// size/rank do not match the group; the communicator's errors (DeadlineExceeded naming the missing
// ranks, Aborted, InvalidArgument) keep their code and get the op name prepended.
// Thread-safety: thread-safe (each call uses only its arguments and its member's communicator).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"
#include "mcx/platform/execution_context.h"

namespace mcx {

// True for the ops run_spmd_op_on_host runs.
bool is_spmd_op(ir::OpKind kind);

// An operand in host memory: row-major and contiguous.
struct HostOperand {
  const void* data = nullptr;
  std::vector<int64_t> dims;
};

// Where one execution stands in a collective (not axis_index): the replica group holding ctx->partition_id
// (partition ids in group order; for collective_permute every partition), its rank there, and its communicator
// (ctx->communicator's, checked for size and rank), or null for a group of one. For collective_permute, send_to
// and recv_from are the group ranks it sends to and receives from (-1: none; a program with no pairs or with
// one partition has no communicator). Errors as run_spmd_op_on_host's. A device platform that moves the data
// itself (a GPU library over the same members) finds its member here, so both paths agree on the groups.
struct SpmdMember {
  std::vector<int64_t> group;
  int rank = 0;
  Communicator* comm = nullptr;
  int send_to = -1;
  int recv_from = -1;
};
absl::StatusOr<SpmdMember> spmd_member(const ir::Instr& instr, const ExecutionContext* ctx);

// Runs one SPMD instruction; `operand` is its operand (ignored by axis_index, which has none) and out_dims the
// result's concrete dims. The result may be storage shared, read-only, by the members of the group in this
// process (Communicator::all_reduce_shared): the caller never writes to it in place. ctx may be null
// (partition 0 of 1). `member`, when given, is spmd_member(instr, ctx) already found by the caller (a device
// platform that first tried its own path), so the group is not looked up twice; ignored by axis_index.
absl::StatusOr<Buffer> run_spmd_op_on_host(const ir::Instr& instr, const HostOperand& operand,
                                           const std::vector<int64_t>& out_dims, const ExecutionContext* ctx,
                                           const SpmdMember* member = nullptr);

}  // namespace mcx
