// cuBLASLt, loaded at run time from libcublasLt.so.13 (never linked; found as dynamic_library.h says): the
// matrix multiplications of dot_general (gemm.h).
//
// Thread-safety: cublaslt() loads once (thread-safe); the table is immutable afterwards.
#pragma once

#include <cublasLt.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mcx::cuda {

#define MCX_CUBLASLT_FUNCTIONS(X)                                                                         \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusName)                     \
  X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                     \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct CublasLtApi {
#define MCX_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  MCX_CUBLASLT_FUNCTIONS(MCX_CUBLASLT_MEMBER)
#undef MCX_CUBLASLT_MEMBER
  std::string library;  // the file it was loaded from
};

// The process's cuBLASLt; FailedPrecondition naming the library and where it was looked for.
absl::StatusOr<const CublasLtApi*> cublaslt();

// OK for CUBLAS_STATUS_SUCCESS; else Internal (ResourceExhausted for allocation failures) naming `what` and the
// status.
absl::Status cublas_status(const CublasLtApi& api, cublasStatus_t s, absl::string_view what);

}  // namespace mcx::cuda
