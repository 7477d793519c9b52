// Batched matrix multiplication on a GPU through cuBLASLt (cublaslt_api.h): the CUDA executable's dot_general,
// once its operands are laid out row-major as [batch, M, K] and [batch, K, N], giving [batch, M, N].
//
// Precision: float32 multiplies on TF32 tensor cores by default (inputs rounded to 10 mantissa bits, sums in
// float32), as JAX's default matmul precision does on GPUs; MCX_GPU_MATMUL_PRECISION=highest asks for full float32
// (as jax_default_matmul_precision="highest"). float16 and bfloat16 accumulate in float32; float64 is float64
// throughout. Other dtypes are refused (gemm_supports).
//
// Per device: one cuBLASLt handle, a 32 MiB workspace from the device's allocator, and the algorithm chosen by
// cuBLASLt's heuristic cached per shape. Thread-safety: thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/core/dtype.h"

namespace mcx::cuda {

struct GemmShape {
  DType dtype = DType::kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool operator==(const GemmShape&) const = default;
};

bool gemm_supports(DType dtype);

// Whether float32 products run in full float32 (MCX_GPU_MATMUL_PRECISION=highest) rather than TF32 (default).
// InvalidArgument naming the variable for a value other than default or highest.
absl::StatusOr<bool> full_float32_matmul();

// Enqueues c = a · b (device addresses of contiguous row-major operands of `shape`) on the device's stream.
// The device's context must be current. m, n, k > 0. FailedPrecondition when cuBLASLt cannot be loaded;
// Unimplemented when it has no algorithm for the shape; its errors otherwise.
absl::Status run_gemm(const CudaDevice& device, const GemmShape& shape, uint64_t a, uint64_t b, uint64_t c);

}  // namespace mcx::cuda
