// Naive SPMD reference: evaluates one per-device program on N partitions in lockstep, the oracle for the
// backend's collective kernels, the partitioner and the SPMD VJP rules. It shares no code with the
// backend or the communicators.
//
// Semantics (op.h, SPMD ops): partition p runs `per_device` on args_per_partition[p]. Instructions run
// one at a time on all partitions; a collective instruction is computed from every partition's operand
// at once:
//  - all_reduce / reduce_scatter reduce the group's operands in group order (member 0 first) in double
//    for floating dtypes (int64 with two's-complement wraparound for integers; or/and for bool max/min),
//    then round once to the dtype. reduce_scatter gives member r block r along `dimension`.
//  - all_gather concatenates the members' operands along `dimension` in group order.
//  - all_to_all cuts each member's operand into group_size blocks along split_dimension; member k
//    receives block k of every member and concatenates them along concat_dimension in member order.
//  - collective_permute: each target gets its source's operand; a partition no pair targets gets zeros.
//  - axis_index: (p / prod(mesh_shape[axis+1:])) % mesh_shape[axis].
//  - sharding_constraint: identity.
// Every other op is reference_eval's single-instruction evaluator on each partition.
// replica_groups must cover exactly 0..N-1 and source_target_pairs must name partitions < N
// (InvalidArgument otherwise).
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::test {

// Returns, per partition, one Buffer per program result.
absl::StatusOr<std::vector<std::vector<Buffer>>> spmd_reference_evaluate(
    const ir::Program& per_device, int num_partitions, const std::vector<std::vector<Buffer>>& args_per_partition);

// One SPMD instruction (a collective, axis_index or sharding_constraint) on all partitions at once:
// operands_per_partition[p] holds partition p's operands; returns partition p's result at index p.
// Used by spmd_reference_evaluate and, with num_partitions 1, by reference_evaluate.
absl::StatusOr<std::vector<Buffer>> spmd_reference_instr(const ir::Instr& instr, int num_partitions,
                                                         const std::vector<std::vector<Buffer>>& operands_per_partition);

// True for the ops spmd_reference_instr evaluates.
bool is_spmd_op(ir::OpKind kind);

}  // namespace mcx::test
