#include "mcx/backend/cuda/gemm.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/cublaslt_api.h"
#include "mcx/backend/cuda/cuda_device_buffer.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/mutex.h"

namespace mcx::cuda {
namespace {

const Flag<std::string> kMatmulPrecisionFlag(
    "MCX_GPU_MATMUL_PRECISION", "default",
    "float32 matrix products on GPUs: default (TF32 tensor cores, as JAX's default) or highest (full float32)",
    one_of({"default", "highest"}));

// cuBLASLt's workspace per device: 32 MiB (what it asks for on Hopper), but at most an eighth of the allocator's
// limit (a small MCX_GPU_MEMORY_FRACTION leaves room for the arrays; cuBLASLt then picks among fewer algorithms).
size_t workspace_bytes(const CudaDevice& device) {
  constexpr size_t kPreferred = size_t{32} << 20;
  const size_t limit = device.allocator().limit_bytes();
  return limit == 0 ? kPreferred : std::min(kPreferred, limit / 8);
}

// One shape's cuBLASLt objects and chosen algorithm.
struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool double_scale = false;
};

// A device's handle, workspace and plans.
struct GemmContext {
  Mutex mu;
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<DeviceMemory> workspace;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool>, MatmulPlan> plans ABSL_GUARDED_BY(mu);
};

Mutex contexts_mu;
std::map<const CudaDevice*, std::unique_ptr<GemmContext>>& contexts() {
  static auto* m = new std::map<const CudaDevice*, std::unique_ptr<GemmContext>>();
  return *m;
}

absl::StatusOr<GemmContext*> context_of(const CudaDevice& device, const CublasLtApi& api) {
  MutexLock lock(&contexts_mu);
  std::unique_ptr<GemmContext>& ctx = contexts()[&device];
  if (ctx != nullptr) return ctx.get();
  auto made = std::make_unique<GemmContext>();
  if (absl::Status st = cublas_status(api, api.cublasLtCreate(&made->handle), "cublasLtCreate"); !st.ok()) {
    if (made->handle != nullptr) api.cublasLtDestroy(made->handle);  // what a failed create made
    return st;
  }
  MCX_ASSIGN_OR_RETURN(made->workspace, DeviceMemory::allocate(device, workspace_bytes(device)));
  ctx = std::move(made);
  return ctx.get();
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

// Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T[N,M] = B^T[N,K] A^T[K,M]: cuBLASLt's A is our b (N x K,
// leading dimension N), its B our a (K x M, leading dimension K), its C our c (N x M, leading dimension N).
absl::StatusOr<MatmulPlan> make_plan(const CublasLtApi& api, GemmContext& ctx, const GemmShape& s, bool full_f32) {
  MatmulPlan p;
  const bool f64 = s.dtype == DType::kFloat64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                      : (s.dtype == DType::kFloat32 && !full_f32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                  : CUBLAS_COMPUTE_32F;
  p.double_scale = f64;
  MCX_RETURN_IF_ERROR(cublas_status(api, api.cublasLtMatmulDescCreate(&p.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F),
                                    "cublasLtMatmulDescCreate"));
  const cudaDataType_t t = data_type(s.dtype);
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t stride) -> absl::Status {
    MCX_RETURN_IF_ERROR(cublas_status(api, api.cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows),
                                                                          static_cast<uint64_t>(cols), rows),
                                      "cublasLtMatrixLayoutCreate"));
    const int32_t batch = static_cast<int32_t>(s.batch);
    MCX_RETURN_IF_ERROR(cublas_status(
        api, api.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
        "batch count"));
    return cublas_status(
        api, api.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
        "batch stride");
  };
  MCX_RETURN_IF_ERROR(layout(&p.a, s.n, s.k, s.n * s.k));
  MCX_RETURN_IF_ERROR(layout(&p.b, s.k, s.m, s.k * s.m));
  MCX_RETURN_IF_ERROR(layout(&p.c, s.n, s.m, s.n * s.m));
  cublasLtMatmulPreference_t pref = nullptr;
  MCX_RETURN_IF_ERROR(cublas_status(api, api.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t ws = ctx.workspace->bytes();
  api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      api.cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  api.cublasLtMatmulPreferenceDestroy(pref);
  MCX_RETURN_IF_ERROR(cublas_status(api, st, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) {
    return absl::UnimplementedError(absl::StrCat("[cuda] cuBLASLt has no algorithm for a ", std::string(dtype_short_name(s.dtype)),
                                                 " product of batch ", s.batch, " (", s.m, "x", s.k, ") x (", s.k, "x",
                                                 s.n, ")"));
  }
  p.algo = result.algo;
  return p;
}

}  // namespace

bool gemm_supports(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16 || dtype == DType::kFloat64;
}

absl::StatusOr<bool> full_float32_matmul() {
  MCX_ASSIGN_OR_RETURN(std::string v, kMatmulPrecisionFlag.get());
  return v == "highest";
}

absl::Status run_gemm(const CudaDevice& device, const GemmShape& s, uint64_t a, uint64_t b, uint64_t c) {
  MCX_ASSIGN_OR_RETURN(const CublasLtApi* api, cublaslt());
  MCX_ASSIGN_OR_RETURN(const bool full_f32, full_float32_matmul());
  MCX_ASSIGN_OR_RETURN(GemmContext* ctx, context_of(device, *api));
  MutexLock lock(&ctx->mu);
  const auto key = std::make_tuple(static_cast<int>(s.dtype), s.batch, s.m, s.n, s.k, full_f32);
  auto it = ctx->plans.find(key);
  if (it == ctx->plans.end()) {
    MCX_ASSIGN_OR_RETURN(MatmulPlan plan, make_plan(*api, *ctx, s, full_f32));
    it = ctx->plans.emplace(key, plan).first;
  }
  const MatmulPlan& p = it->second;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = p.double_scale ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = p.double_scale ? static_cast<const void*>(&zero_d) : &zero_f;
  return cublas_status(
      *api,
      api->cublasLtMatmul(ctx->handle, p.desc, alpha, reinterpret_cast<const void*>(b), p.a,
                          reinterpret_cast<const void*>(a), p.b, beta, reinterpret_cast<const void*>(c), p.c,
                          reinterpret_cast<void*>(c), p.c, &p.algo, reinterpret_cast<void*>(ctx->workspace->address()),
                          ctx->workspace->bytes(), reinterpret_cast<cudaStream_t>(device.stream())),
      absl::StrCat("[", device.label(), "] cublasLtMatmul"));
}

}  // namespace mcx::cuda
