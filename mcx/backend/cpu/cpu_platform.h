// The CPU platform ("cpu"; platform/platform.h): the CPU backend behind the platform interface. Its devices'
// memory is host memory, so a buffer is a Buffer (host_buffer() without a copy) and from_host/to_host share
// storage instead of copying. compile() is CpuExecutable::compile; executables serialise as CpuExecutable's
// do (executable.h lists the errors of both).
//
// Thread-safety: as the interface: every member may be called from any thread.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/backend/cpu/platform_name.h"
#include "mcx/platform/device_buffer.h"
#include "mcx/platform/executable.h"
#include "mcx/platform/platform.h"

namespace mcx::cpu {

// Below any accelerator's, so that a usable GPU is the default when both are there.
inline constexpr int kCpuPlatformPriority = 0;

// A CPU device's buffer: host memory.
class CpuDeviceBuffer final : public DeviceBuffer {
 public:
  explicit CpuDeviceBuffer(Buffer buffer) : buffer_(std::move(buffer)) {}
  std::string_view platform() const override { return kCpuPlatformName; }
  DType dtype() const override { return buffer_.dtype(); }
  const std::vector<int64_t>& dims() const override { return buffer_.dims(); }
  const Buffer* host_buffer() const override { return &buffer_; }
  const Buffer& buffer() const { return buffer_; }

 private:
  Buffer buffer_;
};

// The CPU platform's executable: a CpuExecutable.
class CpuPlatformExecutable final : public Executable {
 public:
  explicit CpuPlatformExecutable(std::shared_ptr<const CpuExecutable> exe) : exe_(std::move(exe)) {}
  std::string_view platform() const override { return kCpuPlatformName; }
  const ir::Program& program() const override { return exe_->program(); }
  bool has_collectives() const override { return exe_->has_collectives(); }
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> execute(
      std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const override;
  absl::StatusOr<std::string> serialize() const override { return exe_->serialize(); }
  const std::shared_ptr<const CpuExecutable>& cpu_executable() const { return exe_; }

 private:
  std::shared_ptr<const CpuExecutable> exe_;
};

// A new CPU platform object (the registry keeps one per process: register_cpu_platform).
std::unique_ptr<Platform> make_cpu_platform();

// Registers "cpu" (kCpuPlatformPriority) with the platform registry (platform/platform_registry.h). Idempotent.
absl::Status register_cpu_platform();

}  // namespace mcx::cpu
