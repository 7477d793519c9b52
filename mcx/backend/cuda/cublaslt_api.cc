#include "mcx/backend/cuda/cublaslt_api.h"

#include <cuda.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/dynamic_library.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

absl::StatusOr<CublasLtApi> load() {
  absl::StatusOr<DynamicLibrary> lib = open_cuda_library("cublasLt", "cuBLASLt");
  if (!lib.ok()) return lib.status();
  CublasLtApi api;
  api.library = lib->path();
#define MCX_CUBLASLT_RESOLVE(name)                                                 \
  {                                                                                \
    absl::StatusOr<void*> p = lib->symbol(#name);                                  \
    if (!p.ok()) return absl::FailedPreconditionError(p.status().message());       \
    api.name = reinterpret_cast<decltype(api.name)>(*p);                           \
  }
  MCX_CUBLASLT_FUNCTIONS(MCX_CUBLASLT_RESOLVE)
#undef MCX_CUBLASLT_RESOLVE
  return api;
}

}  // namespace

absl::StatusOr<const CublasLtApi*> cublaslt() {
  static const absl::StatusOr<CublasLtApi>* api = new absl::StatusOr<CublasLtApi>(load());
  if (!api->ok()) return api->status();
  return &api->value();
}

absl::Status cublas_status(const CublasLtApi& api, cublasStatus_t s, absl::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", api.cublasLtGetStatusName(s), " (", api.cublasLtGetStatusString(s), ")");
  return s == CUBLAS_STATUS_ALLOC_FAILED ? absl::ResourceExhaustedError(msg) : absl::InternalError(msg);
}

}  // namespace mcx::cuda
