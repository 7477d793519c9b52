// NCCL, loaded at run time from libnccl.so.2 (never linked; found as dynamic_library.h says: MCX_CUDA_LIBRARY_PATH,
// the dynamic linker, the toolkit's folder): the entry points the GPUs' device-to-device collectives are built on
// (non-blocking communicators whose asynchronous errors are polled against a deadline, and aborted when a member
// process is declared dead), and the version for messages and cache keys.
//
// Thread-safety: nccl() loads once (thread-safe); the table is immutable afterwards.
#pragma once

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mcx::cuda {

#define MCX_NCCL_FUNCTIONS(X)                                                                                \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommFinalize) X(ncclCommDestroy)      \
  X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError) X(ncclAllReduce)       \
  X(ncclAllGather) X(ncclReduceScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

struct NcclApi {
#define MCX_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  MCX_NCCL_FUNCTIONS(MCX_NCCL_MEMBER)
#undef MCX_NCCL_MEMBER
  std::string library;  // the file it was loaded from
  int version = 0;      // ncclGetVersion's: 22807 for 2.28.7
};

// The process's NCCL; FailedPrecondition naming the library and where it was looked for, or an NCCL older than
// 2.14 (the first with non-blocking communicators and ncclCommInitRankConfig's config).
absl::StatusOr<const NcclApi*> nccl();

// "2.28.7" for 22807.
std::string nccl_version_string(int version);

// OK for ncclSuccess (and ncclInProgress: a non-blocking call under way); else Internal naming `what`, the
// result's name and NCCL's last error (Unavailable for ncclRemoteError and ncclSystemError: a peer or the network
// failed).
absl::Status nccl_status(const NcclApi& api, ncclResult_t r, absl::string_view what);

}  // namespace mcx::cuda
