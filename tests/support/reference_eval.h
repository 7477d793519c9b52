// A deliberately naive reference evaluator for IR programs: the oracle that kernels and VJP rules are
// tested against. It shares no code with the backend.
//
// Semantics (the op.h table, made exact):
//  - Floating ops compute in double and round the result to the op's dtype after every op (so an f32
//    program is evaluated as "correctly rounded f32 per op"). Integer and bool ops compute in int64 with
//    two's-complement wraparound, then wrap to the op's dtype.
//  - Integer div truncates toward zero; rem has the sign of x. As XLA: x / 0 == -1 (all ones for
//    unsigned), x % 0 == x, INT_MIN / -1 == INT_MIN, INT_MIN % -1 == 0. Integer pow with a negative
//    exponent: 1 for x == 1, +-1 for x == -1, 0 otherwise.
//  - convert float -> integer truncates toward zero and saturates to the target range, NaN -> 0 (as XLA
//    CPU); anything -> bool is (x != 0); bool -> number is 0/1; integer narrowing wraps.
//  - Float max/min propagate NaN; reduce_max/min of an empty set are -inf/+inf (lowest/highest integer).
//  - argmax/argmin: the first index of the extreme value; the first NaN wins over any number.
//  - sign(NaN) = NaN, sign(+-0) = +-0; round is half away from zero.
//  - dynamic_slice / dynamic_update_slice start indices are clamped to [0, dim - size]; take and
//    scatter_add indices are clamped to [0, N - 1].
//  - pad supports negative low/high (cropping) and interior padding.
//  - cumsum is inclusive (reverse = 1 scans from the end).
//  - threefry2x32 is the Threefry-2x32 block function with 20 rounds and JAX/Random123's key schedule.
//  - conv_general_dilated and reduce_window: reference_window.h (products summed in double, rounded once;
//    padding holds the reduction's identity).
//  - SPMD ops (op.h) with single-partition semantics (partition 0 of 1): replica groups must be the one
//    group {0} (a group larger than 1 is InvalidArgument), so all_reduce / all_gather / reduce_scatter /
//    all_to_all return x; axis_index is 0; collective_permute returns x for the pair (0, 0) and zeros
//    when no pair targets 0 (a pair naming a partition > 0 is InvalidArgument); sharding_constraint is
//    the identity. spmd_reference.h evaluates them on N partitions.
//  - while, scan and cond run their regions iteration by iteration (reference_control_flow.h).
// Static shapes only: a symbolic dimension in a parameter or instruction type is InvalidArgument.
// Result shapes and dtypes are taken from the instructions' recorded types.
//
// Thread-safety: pure function.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::test {

// Evaluates program on args (one per parameter, matching dtype and dims; InvalidArgument otherwise) and
// returns one Buffer per program result.
absl::StatusOr<std::vector<Buffer>> reference_evaluate(const ir::Program& program,
                                                       std::span<const Buffer> args);

// Evaluates one instruction (static result type) on concrete operands, with the semantics above. The
// instruction's operand ids are not used. The building block of spmd_reference_evaluate.
absl::StatusOr<Buffer> reference_evaluate_instr(const ir::Instr& instr, std::span<const Buffer> operands);

// One threefry2x32 block: encrypts (x0, x1) under key (k0, k1). Exposed for known-answer tests.
std::pair<uint32_t, uint32_t> threefry2x32_block(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1);

}  // namespace mcx::test
