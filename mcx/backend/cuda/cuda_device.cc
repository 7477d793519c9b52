#include "mcx/backend/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mcx/backend/cuda/driver_memory_source.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::cuda {
namespace {

const Flag<double> kGpuMemoryFractionFlag(
    "MCX_GPU_MEMORY_FRACTION", 0.75,
    "fraction of each GPU's memory the CUDA backend's allocator may reserve (as XLA_PYTHON_CLIENT_MEM_FRACTION)",
    [](const double& v) -> std::optional<std::string> {
      if (v > 0 && v <= 1) return std::nullopt;
      return "must be in (0, 1]";
    });

}  // namespace

absl::StatusOr<double> gpu_memory_fraction() { return kGpuMemoryFractionFlag.get(); }

std::string CudaDevice::label() const { return absl::StrCat("GPU ", info_.ordinal); }

absl::Status CudaDevice::check(CUresult r, std::string_view what) const {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  return driver_status(api_, r, absl::StrCat("[", label(), "] ", std::string(what)));
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::open(const DriverApi& api, int ordinal) {
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  const std::string where = absl::StrCat("[GPU ", ordinal, "] ");
  CUdevice dev = 0;
  MCX_RETURN_IF_ERROR(driver_status(api, api.cuDeviceGet(&dev, ordinal), where + "cuDeviceGet"));
  char name[256] = {};
  MCX_RETURN_IF_ERROR(driver_status(api, api.cuDeviceGetName(name, sizeof(name) - 1, dev), where + "cuDeviceGetName"));
  info.name = name;
  CUuuid uuid{};
  MCX_RETURN_IF_ERROR(driver_status(api, api.cuDeviceGetUuid(&uuid, dev), where + "cuDeviceGetUuid"));
  std::memcpy(info.uuid.data(), uuid.bytes, info.uuid.size());
  int major = 0, minor = 0, sms = 0;
  MCX_RETURN_IF_ERROR(driver_status(
      api, api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), where + "compute capability"));
  MCX_RETURN_IF_ERROR(driver_status(
      api, api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), where + "compute capability"));
  MCX_RETURN_IF_ERROR(driver_status(
      api, api.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), where + "multiprocessor count"));
  info.arch = 10 * major + minor;
  info.sm_count = sms;
  MCX_RETURN_IF_ERROR(driver_status(api, api.cuDeviceTotalMem(&info.total_memory, dev), where + "cuDeviceTotalMem"));
  MCX_ASSIGN_OR_RETURN(const double fraction, gpu_memory_fraction());

  std::unique_ptr<CudaDevice> d(new CudaDevice(api, std::move(info)));
  d->device_ = dev;
  MCX_RETURN_IF_ERROR(d->check(api.cuDevicePrimaryCtxRetain(&d->context_, dev), "cuDevicePrimaryCtxRetain"));
  MCX_RETURN_IF_ERROR(d->make_current());
  MCX_RETURN_IF_ERROR(d->check(api.cuStreamCreate(&d->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  MCX_RETURN_IF_ERROR(
      d->check(api.cuStreamCreate(&d->copy_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (uploads)"));
  d->memory_ = std::make_unique<DriverMemorySource>(api);
  const auto limit = static_cast<size_t>(fraction * static_cast<double>(d->info_.total_memory));
  d->allocator_ = std::make_unique<CachingAllocator>(
      *d->memory_, AllocatorOptions{.limit_bytes = limit,
                                    .device_name = d->label(),
                                    .limit_origin = absl::StrFormat("MCX_GPU_MEMORY_FRACTION=%g of %.1f GiB", fraction,
                                                                    static_cast<double>(d->info_.total_memory) / (1 << 30))});
  return d;
}

CudaDevice::~CudaDevice() {
  if (context_ == nullptr) return;
  if (!make_current().ok()) return;
  for (CUstream s : {stream_, copy_stream_}) {
    if (s != nullptr) api_.cuStreamSynchronize(s);
  }
  allocator_.reset();  // returns its segments while the context is alive
  for (Staging& lane : staging_) {
    MutexLock lock(&lane.mu);
    for (int i = 0; i < 2; ++i) {
      if (lane.copied[i] != nullptr) api_.cuEventDestroy(lane.copied[i]);
      if (lane.buffer[i] != nullptr) api_.cuMemFreeHost(lane.buffer[i]);
    }
  }
  for (CUstream s : {stream_, copy_stream_}) {
    if (s != nullptr) api_.cuStreamDestroy(s);
  }
  api_.cuDevicePrimaryCtxRelease(device_);
}

absl::Status CudaDevice::make_current() const { return check(api_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

absl::Status CudaDevice::wait(const std::function<CUresult()>& query, absl::Time deadline, std::string_view what,
                              const std::function<absl::Status()>& abandon) const {
  absl::Duration pause = absl::Microseconds(2);
  while (true) {
    const CUresult r = query();
    if (r == CUDA_SUCCESS) return absl::OkStatus();
    if (r != CUDA_ERROR_NOT_READY) return check(r, what);
    if (abandon) MCX_RETURN_IF_ERROR(abandon());
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("[", label(), "] ", std::string(what),
                                                      ": not finished by the deadline (MCX_DEVICE_TIMEOUT_S)"));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(pause));
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

absl::Status CudaDevice::synchronize(absl::Time deadline) const {
  return wait([&] { return api_.cuStreamQuery(stream_); }, deadline, "waiting for the device's work");
}

absl::Status CudaDevice::synchronize_unless(absl::Time deadline, const std::function<absl::Status()>& abandon) const {
  return wait([&] { return api_.cuStreamQuery(stream_); }, deadline, "waiting for the device's work", abandon);
}

absl::Status CudaDevice::synchronize_uploads(absl::Time deadline) const {
  return wait([&] { return api_.cuStreamQuery(copy_stream_); }, deadline, "waiting for the device's uploads");
}

absl::StatusOr<void*> CudaDevice::staging(Staging& s, int i, absl::Time deadline) const {
  if (s.buffer[i] == nullptr) {
    MCX_RETURN_IF_ERROR(check(api_.cuMemHostAlloc(&s.buffer[i], kStagingBytes, 0), "cuMemHostAlloc (pinned staging)"));
    MCX_RETURN_IF_ERROR(check(api_.cuEventCreate(&s.copied[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    return s.buffer[i];
  }
  // The buffer's last copy must be done before it is written again.
  CUevent last = s.copied[i];
  MCX_RETURN_IF_ERROR(wait([&] { return api_.cuEventQuery(last); }, deadline, "waiting for a staged copy"));
  return s.buffer[i];
}

absl::Status CudaDevice::to_device(uint64_t dst, const void* src, size_t bytes, absl::Time deadline,
                                   Lane lane) const {
  MCX_RETURN_IF_ERROR(make_current());
  Staging& s = staging_of(lane);
  const CUstream on = stream(lane);
  MutexLock lock(&s.mu);
  const auto* from = static_cast<const std::byte*>(src);
  for (size_t done = 0, chunk = 0; done < bytes; done += kStagingBytes, ++chunk) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    const int i = static_cast<int>(chunk % 2);
    MCX_ASSIGN_OR_RETURN(void* stage, staging(s, i, deadline));
    std::memcpy(stage, from + done, n);
    MCX_RETURN_IF_ERROR(check(api_.cuMemcpyHtoDAsync(static_cast<CUdeviceptr>(dst + done), stage, n, on),
                              "cuMemcpyHtoDAsync"));
    MCX_RETURN_IF_ERROR(check(api_.cuEventRecord(s.copied[i], on), "cuEventRecord"));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::to_host(void* dst, uint64_t src, size_t bytes, absl::Time deadline, Lane lane) const {
  MCX_RETURN_IF_ERROR(make_current());
  Staging& s = staging_of(lane);
  const CUstream on = stream(lane);
  MutexLock lock(&s.mu);
  auto* to = static_cast<std::byte*>(dst);
  // Chunk k is copied into buffer k % 2 while the host copies chunk k - 1 out of the other.
  size_t pending_at = 0, pending_n = 0;
  void* pending_from = nullptr;  // the staging buffer of the chunk still to copy out, or null
  CUevent pending_copy = nullptr;
  for (size_t done = 0, chunk = 0; done < bytes || pending_from != nullptr; done += kStagingBytes, ++chunk) {
    if (done < bytes) {
      const size_t n = std::min(kStagingBytes, bytes - done);
      const int i = static_cast<int>(chunk % 2);
      MCX_ASSIGN_OR_RETURN(void* stage, staging(s, i, deadline));
      MCX_RETURN_IF_ERROR(check(api_.cuMemcpyDtoHAsync(stage, static_cast<CUdeviceptr>(src + done), n, on),
                                "cuMemcpyDtoHAsync"));
      MCX_RETURN_IF_ERROR(check(api_.cuEventRecord(s.copied[i], on), "cuEventRecord"));
    }
    if (pending_from != nullptr) {  // the previous chunk, while this one copies
      MCX_RETURN_IF_ERROR(wait([&] { return api_.cuEventQuery(pending_copy); }, deadline, "copying to the host"));
      std::memcpy(to + pending_at, pending_from, pending_n);
      pending_from = nullptr;
    }
    if (done < bytes) {
      const int i = static_cast<int>(chunk % 2);
      pending_at = done;
      pending_n = std::min(kStagingBytes, bytes - done);
      pending_from = s.buffer[i];
      pending_copy = s.copied[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace mcx::cuda
