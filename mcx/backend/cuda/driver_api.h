// The CUDA driver API, loaded at run time from libcuda.so.1 (never linked: a build runs on machines without a
// driver, and says "no CUDA driver" when asked for the GPU). Each function is resolved through the driver's
// cuGetProcAddress for the CUDA version mcx was built with, as the CUDA runtime does, so a newer driver gives
// the behaviour of that version.
//
// Thread-safety: cuda_driver() loads once (thread-safe); the table is immutable afterwards and its functions
// are the driver's (thread-safe as the driver documents).
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx::cuda {

// The driver functions mcx calls. X(name) with the driver API's base name (cuda.h may map the name to a
// versioned symbol, as cuMemAlloc to cuMemAlloc_v2: the member and its calls follow the same mapping).
#define MCX_CUDA_DRIVER_FUNCTIONS(X)                                                                        \
  X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) \
  X(cuDeviceGetName) X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)               \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo) X(cuMemAlloc)        \
  X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)      \
  X(cuStreamWaitEvent) X(cuStreamQuery) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)            \
  X(cuEventQuery) X(cuEventElapsedTime) X(cuEventDestroy) X(cuModuleLoadData) X(cuModuleUnload)            \
  X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)

struct DriverApi {
#define MCX_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  MCX_CUDA_DRIVER_FUNCTIONS(MCX_CUDA_DRIVER_MEMBER)
#undef MCX_CUDA_DRIVER_MEMBER
  int version = 0;      // cuDriverGetVersion: 1000 * major + 10 * minor (13000 for CUDA 13.0)
  std::string library;  // the file it was loaded from
};

// The CUDA version mcx was built against (CUDA_VERSION of its toolkit's cuda.h).
inline constexpr int kBuiltCudaVersion = CUDA_VERSION;

// "13.0" for 13000.
std::string cuda_version_string(int version);

// The process's driver, loaded and initialised (cuInit) on the first call; later calls return the same table
// or the same error. FailedPrecondition whose message begins "no CUDA driver" when libcuda.so.1 cannot be
// loaded, is the toolkit's stub library, is older than the CUDA version mcx was built with, or finds no device.
absl::StatusOr<const DriverApi*> cuda_driver();

// Loads and initialises the driver from `library` (a soname or a path), with the errors of cuda_driver().
// cuda_driver() calls it once with "libcuda.so.1"; tests call it with other files.
absl::StatusOr<std::unique_ptr<DriverApi>> load_cuda_driver(const std::string& library);

// OK for CUDA_SUCCESS; otherwise an error naming `what` and the driver's name and description of r
// (ResourceExhausted for out-of-memory results, FailedPrecondition for a missing device or driver,
// Internal otherwise).
absl::Status driver_status(const DriverApi& api, CUresult r, absl::string_view what);

}  // namespace mcx::cuda
