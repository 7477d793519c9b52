// Platform: one kind of device the runtime can run on ("cpu", "cuda"), the interface a backend implements
// (the shape of PJRT's client): it compiles programs into Executables for its devices, reads stored ones back,
// and moves dense arrays between host memory and its devices' memory (DeviceBuffer). The runtime is written
// against this interface; a backend registers its platform (platform_registry.h) and the runtime picks the
// platforms it uses from MCX_PLATFORMS.
//
// What a backend implements: the members below. What it may leave to the runtime: device lists and streams
// (one in-order queue per device), readiness and donation of buffers, caching of executables by program,
// sharding, transfers across processes (through host memory), the transfer and thread guards.
//
// Errors name the platform ("[cpu] ..."). Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"
#include "mcx/platform/compiled_store.h"
#include "mcx/platform/device_buffer.h"
#include "mcx/platform/executable.h"

namespace mcx {

// What a platform's code generator has done since the process started (all zero for one without).
struct KernelCompileStats {
  int64_t compiled = 0;    // distinct kernels generated here
  int64_t loaded = 0;      // distinct kernels loaded (compiled-code store, serialised executables)
  int64_t from_peers = 0;  // kernels another process of the job generated
  int64_t reuses = 0;      // requests answered by a kernel already in this process
  double compile_ms = 0;
  double load_ms = 0;
};

class Platform {
 public:
  virtual ~Platform() = default;

  // "cpu", "cuda", ...: the name MCX_PLATFORMS, devices(name), cache keys and messages use.
  virtual std::string_view name() const = 0;
  // OK when this process can run on the platform; else why not (FailedPrecondition: no driver, no device, ...).
  virtual absl::Status usable() const = 0;
  // How many devices of this platform this process drives, or nullopt when its devices are virtual slices of
  // the host (the CPU's): then the runtime makes as many as configured (set_cpu_device_count,
  // MCX_CPU_DEVICE_COUNT).
  virtual std::optional<int> device_count() const { return std::nullopt; }
  // What local device `local_device` is, for Device::kind (as JAX's device_kind): "NVIDIA H200" for a GPU. Default:
  // the platform's name.
  virtual std::string device_kind(int local_device) const {
    (void)local_device;
    return std::string(name());
  }

  // Everything besides the program that decides what compile() makes of it (compile options, serialisation
  // format, code generator target), as named components in a fixed order: part of every key under which
  // executables are stored (compiled_store.h), so a miss names which one changed.
  virtual std::vector<KeyComponent> compile_key() const = 0;
  // The settings of this process that change what compile() makes and may change while it runs (e.g. code
  // generation switched on or off), as one number: the runtime's in-memory executable cache keeps executables
  // of different settings apart. Cheap: called on every dispatch.
  virtual uint64_t compile_setting() const { return 0; }
  // Compiles program (concrete shapes; specialise symbolic ones first). Errors: the platform's compile errors
  // (its executable header lists them), e.g. InvalidArgument for a program that fails verification.
  virtual absl::StatusOr<std::shared_ptr<const Executable>> compile(const ir::Program& program) const = 0;
  // Reads bytes written by Executable::serialize of this platform. Errors: InvalidArgument for damaged or
  // malformed bytes; FailedPrecondition for bytes of another format or target (the caller compiles instead).
  virtual absl::StatusOr<std::shared_ptr<const Executable>> deserialize(std::string_view bytes) const = 0;

  // Counters of the platform's code generator, for statistics and the exit report.
  virtual KernelCompileStats kernel_stats() const { return {}; }

  // A buffer on local device `local_device` (an index among this process's devices of the platform) holding
  // host's values (a copy where the device's memory is not host memory). InvalidArgument for a device index
  // out of range.
  virtual absl::StatusOr<std::shared_ptr<const DeviceBuffer>> from_host(const Buffer& host, int local_device) const = 0;
  // Whether from_host may run while the device computes (a GPU's copy engines beside its kernels; from_host
  // then must not wait for the device's computation, and its result is complete when it returns). The runtime
  // then gives each device a queue of its own for host-to-device copies (runtime/stream.h), so the next batch's
  // upload overlaps the current step. Default false: copies are queued behind the device's computations.
  virtual bool copies_beside_compute() const { return false; }
  // The values of a buffer of this platform in host memory (without a copy where they are host memory
  // already). InvalidArgument (naming both platforms) for another platform's buffer.
  virtual absl::StatusOr<Buffer> to_host(const DeviceBuffer& buffer) const = 0;
};

}  // namespace mcx
