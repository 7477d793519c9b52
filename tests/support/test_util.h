// Test helpers shared by every layer's tests: seeded random Buffers, a Buffer comparison for gtest,
// one-op programs, and central finite differences through the reference evaluator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/ir/program.h"

namespace mcx::test {

// Deterministic random Buffer for a seed. Floating dtypes: uniform in [lo, hi). Integer dtypes: uniform
// integers in [ceil(lo), floor(hi)] (clipped to the dtype's range). Bool: fair coin.
Buffer random_buffer(DType dtype, std::vector<int64_t> dims, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Like random_buffer for floating dtypes, but every element's magnitude is at least min_abs (the sign is
// random): keeps inputs away from the kinks of abs/sign/max at 0 for finite differences.
Buffer random_buffer_away_from_zero(DType dtype, std::vector<int64_t> dims, uint64_t seed, double min_abs,
                                    double max_abs);
// A scalar Buffer of dtype holding v (converted as by static_cast).
Buffer scalar_buffer(DType dtype, double v);
// A Buffer of dtype and dims from doubles (converted as by static_cast; bool is v != 0).
Buffer buffer_from_doubles(DType dtype, std::vector<int64_t> dims, const std::vector<double>& values);

// gtest predicate: same dtype and dims, and |a - e| <= atol + rtol * |e| elementwise (NaN matches NaN,
// infinities must match exactly). The failure message names the first mismatching multi-index, both
// values and the number of mismatches.
::testing::AssertionResult buffers_near(const Buffer& actual, const Buffer& expected, double rtol, double atol);
// EXPECT_TRUE(buffers_near(...)), for brevity.
void expect_buffers_near(const Buffer& actual, const Buffer& expected, double rtol, double atol);

// A program with one parameter per operand type, one instruction kind(params...) with attrs, and its
// result. Throws mcx::Error when the shape rule rejects it.
ir::Program single_op_program(ir::OpKind kind, std::vector<AbstractValue> operand_types, ir::Attrs attrs = {});

// Central finite-difference vector-Jacobian product of f at args: for each i in wrt, the gradient of
// sum_j <cotangents[j], f_j(args)> with respect to args[i] (float64 params only), each element perturbed
// by +-eps * max(1, |x|). Results are float64 Buffers shaped like args[i]. Uses reference_evaluate.
absl::StatusOr<std::vector<Buffer>> numerical_vjp(const ir::Program& f, std::span<const Buffer> args,
                                                  std::span<const Buffer> cotangents, const std::vector<int>& wrt,
                                                  double eps = 1e-6);

// Checks ir::vjp_program(f, wrt) at args (float64 wrt parameters) against numerical_vjp for random
// cotangents from seed: the program and its VJP verify, the VJP's primal results equal f's bitwise, and
// each gradient has its parameter's type and is within rtol/atol of the central differences (gtest
// failures, reported at the caller's test). Then checks the forward mode (check_jvp) and vmap (check_vmap)
// on the same program, so every VJP test also tests the JVP and batching rules.
void check_vjp(const ir::Program& f, const std::vector<Buffer>& args, const std::vector<int>& wrt, uint64_t seed,
               double rtol = 1e-6, double atol = 1e-8);

// Checks ir::jvp_program(f, wrt) and ir::linearize_programs(f, wrt) at args (float64 wrt parameters) for
// random tangents from seed: the programs verify; the primal results equal f's bitwise; each tangent has
// its result's type and is within rtol/atol of the central difference of f along the tangents; the
// tangents agree with the VJP program through <ct, J t> = <J^T ct, t> for random cotangents (to 1e-9 of
// the terms' magnitude); and the linearized pair (primal, then linear on the residuals) gives the jvp
// program's values bitwise.
void check_jvp(const ir::Program& f, const std::vector<Buffer>& args, const std::vector<int>& wrt, uint64_t seed,
               double rtol = 1e-6, double atol = 1e-8);

// Checks ir::vmap_program(f, batched, 3) at examples made from args (float64 parameters get random
// values per batch index from seed; the others repeat args) against f evaluated on each example, for
// four choices of batched parameters: all of them, the floating ones, the first floating one alone and
// the last floating one alone.
// The batched program must verify and give each example's results to 1e-13.
void check_vmap(const ir::Program& f, const std::vector<Buffer>& args, uint64_t seed);

}  // namespace mcx::test
