#include "mcx/backend/cuda/cuda_platform.h"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/backend/cuda/cuda_device_buffer.h"
#include "mcx/backend/cuda/cuda_executable.h"
#include "mcx/backend/cuda/driver_api.h"
#include "mcx/backend/cuda/ptx_assembler.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/topology.h"
#include "mcx/platform/platform.h"
#include "mcx/platform/platform_registry.h"

#ifndef MCX_CUDA_GENERATOR_DIGEST
#define MCX_CUDA_GENERATOR_DIGEST "unknown"
#endif
#ifndef MCX_LLVM_VERSION_STRING
#define MCX_LLVM_VERSION_STRING "unknown"
#endif

namespace mcx::cuda {
namespace {

const Flag<std::string> kKernelTargetFlag(
    "MCX_CUDA_KERNEL_TARGET", "device",
    "what generated GPU kernels are compiled for: device (the GPUs' architecture) or host (the host emulating the "
    "GPU, run only by the stand-in driver of mcx's tests)",
    one_of({"device", "host"}));

// The ordinals to open among the `visible` the driver shows: the requested ones (core/topology.h), each once and in
// range, else all. InvalidArgument naming the request, the count and CUDA_VISIBLE_DEVICES otherwise.
absl::StatusOr<std::vector<int>> ordinals_to_open(int visible) {
  std::vector<int> out;
  const std::optional<std::vector<int>> requested = requested_local_device_ids();
  if (!requested.has_value()) {
    for (int i = 0; i < visible; ++i) out.push_back(i);
    return out;
  }
  for (int id : *requested) {
    if (id < 0 || id >= visible || std::find(out.begin(), out.end(), id) != out.end()) {
      const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
      return absl::InvalidArgumentError(absl::StrCat(
          "[cuda] local device ids {", absl::StrJoin(*requested, ","), "} (local_device_ids / MCX_LOCAL_DEVICE_IDS): ",
          id < 0 || id >= visible ? absl::StrCat("GPU ", id, " does not exist") : absl::StrCat("GPU ", id, " is named twice"),
          "; this process sees ", visible, " GPUs (ordinals 0 to ", visible - 1, "; CUDA_VISIBLE_DEVICES=",
          env != nullptr ? env : "(unset)", ")"));
    }
    out.push_back(id);
  }
  return out;
}

class CudaPlatform final : public Platform {
 public:
  std::string_view name() const override { return kCudaPlatformName; }

  absl::Status usable() const override { return devices().status(); }

  std::optional<int> device_count() const override {
    absl::StatusOr<const CudaDevices*> d = devices();
    return d.ok() ? static_cast<int>((*d)->size()) : 0;
  }

  std::string device_kind(int local_device) const override {
    absl::StatusOr<const CudaDevices*> d = devices();
    if (!d.ok() || local_device < 0 || local_device >= static_cast<int>((*d)->size())) return std::string(name());
    return (*(*d))[local_device]->info().name;
  }

  // The devices' architecture, the driver's and the toolkit's CUDA versions, the PTX assembler's version, the
  // LLVM that generates the kernels and a digest of the generator's sources.
  std::vector<KeyComponent> compile_key() const override {
    std::vector<KeyComponent> key;
    absl::StatusOr<const CudaDevices*> d = devices();
    absl::StatusOr<int> arch = d.ok() ? target_arch(**d) : absl::StatusOr<int>(d.status());
    key.push_back({"arch", arch.ok() ? arch_name(*arch) : d.ok() ? arch_names(**d) : "none"});
    absl::StatusOr<const DriverApi*> api = cuda_driver();
    key.push_back({"cuda_driver", api.ok() ? cuda_version_string((*api)->version) : "none"});
    key.push_back({"cuda_toolkit", cuda_version_string(kBuiltCudaVersion)});
    absl::StatusOr<std::string> assembler = ptx_assembler_version();
    key.push_back({"ptx_assembler", assembler.ok() ? absl::StrCat("nvJitLink ", *assembler) : "driver"});
    key.push_back({"llvm_version", MCX_LLVM_VERSION_STRING});
    key.push_back({"generator", MCX_CUDA_GENERATOR_DIGEST});
    return key;
  }

  absl::StatusOr<std::shared_ptr<const Executable>> compile(const ir::Program& program) const override {
    MCX_ASSIGN_OR_RETURN(const CudaDevices* d, devices());
    MCX_ASSIGN_OR_RETURN(const int arch, target_arch(*d));
    const auto t0 = std::chrono::steady_clock::now();
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const CudaExecutable> exe, CudaExecutable::compile(program, *d, arch));
    compiled_.fetch_add(static_cast<int64_t>(exe->kernels().size()), std::memory_order_relaxed);
    compile_us_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count(),
                          std::memory_order_relaxed);
    return exe;
  }

  absl::StatusOr<std::shared_ptr<const Executable>> deserialize(std::string_view bytes) const override {
    MCX_ASSIGN_OR_RETURN(const CudaDevices* d, devices());
    MCX_ASSIGN_OR_RETURN(const int arch, target_arch(*d));
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const CudaExecutable> exe, CudaExecutable::deserialize(bytes, *d, arch));
    return exe;
  }

  KernelCompileStats kernel_stats() const override {
    KernelCompileStats s;
    s.compiled = compiled_.load(std::memory_order_relaxed);
    s.compile_ms = static_cast<double>(compile_us_.load(std::memory_order_relaxed)) / 1000.0;
    return s;
  }

  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> from_host(const Buffer& host, int local_device) const override {
    MCX_ASSIGN_OR_RETURN(const CudaDevices* d, devices());
    if (local_device < 0 || local_device >= static_cast<int>(d->size())) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda] local device ", local_device, " out of range: this process has ",
                                                     d->size(), " CUDA devices"));
    }
    // On the uploads' stream, so that the copy runs while the kernels queued before it do, and complete when it
    // returns (copies_beside_compute); the kernels that read it later are on the other stream: the allocator
    // hands the memory out again only after their work too.
    const CudaDevice& device = *(*d)[local_device];
    using Lane = CudaDevice::Lane;
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> mem, DeviceMemory::allocate(device, host.nbytes(), Lane::kCopy));
    if (host.nbytes() > 0) {
      MCX_ASSIGN_OR_RETURN(const absl::Time deadline, device_deadline_from_now());
      MCX_RETURN_IF_ERROR(device.to_device(mem->address(), host.data(), host.nbytes(), deadline, Lane::kCopy));
      MCX_RETURN_IF_ERROR(device.synchronize_uploads(deadline));
      MCX_RETURN_IF_ERROR(
          device.allocator().record_use(mem->address(), reinterpret_cast<uint64_t>(device.stream(Lane::kCompute))));
    }
    return std::make_shared<CudaDeviceBuffer>(host.dtype(), host.dims(), std::move(mem));
  }

  bool copies_beside_compute() const override { return true; }

  absl::StatusOr<Buffer> to_host(const DeviceBuffer& buffer) const override {
    const auto* b = dynamic_cast<const CudaDeviceBuffer*>(&buffer);
    if (b == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda] to_host of ", buffer.describe(), ": not a cuda buffer"));
    }
    // A buffer handed out is complete (executions and uploads finish before their results are ready), so its
    // download need not queue behind the kernels enqueued since: it goes on the uploads' stream, beside them
    // (an asynchronous checkpoint's copies run while the next step computes).
    Buffer out = Buffer::uninitialized(b->dtype(), b->dims());
    if (out.nbytes() > 0) {
      MCX_ASSIGN_OR_RETURN(const absl::Time deadline, device_deadline_from_now());
      MCX_RETURN_IF_ERROR(b->device().to_host(out.mutable_data(), b->address(), out.nbytes(), deadline,
                                              CudaDevice::Lane::kCopy));
    }
    return out;
  }

 private:
  // The process's GPUs, opened on first use (those requested_local_device_ids names, in its order, else every one
  // the driver shows); the same answer afterwards.
  static absl::StatusOr<const CudaDevices*> devices() {
    static const absl::StatusOr<CudaDevices>* opened = new absl::StatusOr<CudaDevices>([]() -> absl::StatusOr<CudaDevices> {
      MCX_ASSIGN_OR_RETURN(const DriverApi* api, cuda_driver());
      int n = 0;
      MCX_RETURN_IF_ERROR(driver_status(*api, api->cuDeviceGetCount(&n), "cuDeviceGetCount"));
      MCX_ASSIGN_OR_RETURN(const std::vector<int> ordinals, ordinals_to_open(n));
      CudaDevices list;
      for (int i : ordinals) {
        MCX_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> d, CudaDevice::open(*api, i));
        list.push_back(std::move(d));
      }
      return list;
    }());
    if (!opened->ok()) return opened->status();
    return &opened->value();
  }

  // The architecture kernels are compiled for: the devices' (one for all), or the host's under
  // MCX_CUDA_KERNEL_TARGET=host.
  static absl::StatusOr<int> target_arch(const CudaDevices& d) {
    MCX_ASSIGN_OR_RETURN(const std::string target, kKernelTargetFlag.get());
    if (target == "host") return kHostEmulationArch;
    const int arch = d[0]->info().arch;
    for (const auto& dev : d) {
      if (dev->info().arch != arch) {
        return absl::UnimplementedError(absl::StrCat("[cuda_compile] this process's GPUs are of different architectures (",
                                                     arch_names(d), "); one architecture per process is supported"));
      }
    }
    return arch;
  }

  static std::string arch_names(const CudaDevices& d) {
    std::vector<std::string> names;
    for (const auto& dev : d) {
      std::string n = absl::StrCat("sm_", dev->info().arch);
      if (names.empty() || names.back() != n) names.push_back(n);
    }
    return absl::StrJoin(names, ",");
  }

  mutable std::atomic<int64_t> compiled_{0};
  mutable std::atomic<int64_t> compile_us_{0};
};

}  // namespace

absl::Status register_cuda_platform() {
  return register_platform(kCudaPlatformName, kCudaPlatformPriority,
                           []() -> absl::StatusOr<std::unique_ptr<Platform>> { return std::make_unique<CudaPlatform>(); });
}

}  // namespace mcx::cuda
