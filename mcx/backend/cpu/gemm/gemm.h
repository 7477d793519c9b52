// mcx's own f32 GEMM: register-blocked micro-kernels for the CPU's widest vectors (AVX-512 or AVX2, chosen at
// run time from the CPU's features and MCX_CPU_GEMM), split over the CPU thread pool. blas.h routes every f32
// matrix product of the CPU kernels (dot_general, the convolutions' inner products) here; OpenBLAS remains
// the fallback for CPUs without AVX2 and FMA, for f64, and the reference of the tests.
//
// Thread-safety: all functions are thread-safe. A call from inside a thread-pool chunk, or under a reduced
// intra-op budget (thread_pool.h), runs on its caller's threads only.
#pragma once

#include <string_view>

#include "mcx/backend/cpu/gemm/gemm_isa.h"

namespace mcx::cpu {

enum class GemmEngine { kOpenBlas, kAvx2, kAvx512 };

// Whether this CPU (and its OS, which must save the vector registers) can run `engine`.
bool gemm_engine_supported(GemmEngine engine);
// The engine f32 GEMMs use: MCX_CPU_GEMM resolved against the CPU's features (read once per process; an
// engine the CPU lacks, or a malformed value, falls back to auto with one warning).
GemmEngine gemm_engine();
std::string_view gemm_engine_name(GemmEngine engine);  // "openblas", "avx2", "avx512"

// C = op(A) op(B) + beta * C (gemm_isa.h states the problem) on `engine`; an engine this CPU cannot run
// throws std::invalid_argument.
// Work large enough to pay for a hand-off is split into rectangles of C over intra_op_threads() threads.
// M, N, K >= 0; K == 0 scales C by beta (beta == 0 zeroes it).
void sgemm(GemmEngine engine, const gemm::GemmProblem& problem);

}  // namespace mcx::cpu
