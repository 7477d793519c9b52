// Kernels of the SPMD ops (op.h, opset 2) for the CPU executable: all_reduce, all_gather,
// reduce_scatter, all_to_all, collective_permute and axis_index. (sharding_constraint is an alias view
// in executable.cc.) Internal to the CPU backend.
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
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/view.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

bool is_spmd_kernel(ir::OpKind kind);

// Runs one SPMD instruction on its operand views; out_dims are the result's concrete dims.
// ctx may be null (partition 0 of 1).
absl::StatusOr<Buffer> run_spmd_op(const ir::Instr& instr, const std::vector<View>& operands,
                                   const std::vector<int64_t>& out_dims, const ExecutionContext* ctx);

}  // namespace mcx::cpu
