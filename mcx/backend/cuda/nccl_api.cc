#include "mcx/backend/cuda/nccl_api.h"

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/dynamic_library.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

constexpr int kOldestNccl = 21400;  // 2.14: non-blocking communicators

absl::StatusOr<NcclApi> load() {
  absl::StatusOr<DynamicLibrary> lib = open_cuda_library("nccl", "NCCL", 2);
  if (!lib.ok()) return lib.status();
  NcclApi api;
  api.library = lib->path();
#define MCX_NCCL_RESOLVE(name)                                                \
  {                                                                           \
    absl::StatusOr<void*> p = lib->symbol(#name);                             \
    if (!p.ok()) return absl::FailedPreconditionError(p.status().message());  \
    api.name = reinterpret_cast<decltype(api.name)>(*p);                      \
  }
  MCX_NCCL_FUNCTIONS(MCX_NCCL_RESOLVE)
#undef MCX_NCCL_RESOLVE
  MCX_RETURN_IF_ERROR(nccl_status(api, api.ncclGetVersion(&api.version), "ncclGetVersion"));
  if (api.version < kOldestNccl) {
    return absl::FailedPreconditionError(absl::StrCat("NCCL ", nccl_version_string(api.version), " in ", api.library,
                                                      " is older than ", nccl_version_string(kOldestNccl),
                                                      ", the first with non-blocking communicators"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const NcclApi*> nccl() {
  static const absl::StatusOr<NcclApi>* api = new absl::StatusOr<NcclApi>(load());
  if (!api->ok()) return api->status();
  return &api->value();
}

std::string nccl_version_string(int version) {
  return absl::StrCat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

absl::Status nccl_status(const NcclApi& api, ncclResult_t r, absl::string_view what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  const char* last = api.ncclGetLastError != nullptr ? api.ncclGetLastError(nullptr) : nullptr;
  const std::string msg = absl::StrCat("[nccl] ", what, ": ", api.ncclGetErrorString(r),
                                       last != nullptr && *last != '\0' ? absl::StrCat(" (", last, ")") : "");
  return r == ncclRemoteError || r == ncclSystemError ? absl::UnavailableError(msg) : absl::InternalError(msg);
}

}  // namespace mcx::cuda
