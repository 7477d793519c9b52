// The CUDA platform's executable (platform/executable.h): a program planned for the GPU and its generated
// kernels, assembled for the devices' architecture (or compiled for the host emulating it: kHostEmulationArch).
//
// What runs on the GPU now (docs/gpu.md lists it with its precision): element-wise groups, fused as on every
// platform (kernelgen/element_groups.h) and generated from the shared per-element rules; layout ops as copy
// kernels; reductions, argmax/argmin, iota, threefry2x32, argsort, cumsum, take, scatter_add, dynamic slices,
// pad, reduce_window and convolutions as generated kernels (codegen/kernel_source.h lists the kinds);
// dot_general of floats through cuBLASLt (gemm.h); while, scan and cond as steps running their regions'
// executables (cuda_control_flow.h); debug_print on the host. Collectives are refused at compile time with
// Unimplemented naming the instruction, the op and the platform: nothing falls back to the CPU silently.
//
// execute() enqueues every kernel on the device's stream and waits for them (with the context's deadline), so
// a result is complete when the runtime marks it ready and a kernel's failure is reported by its own op; the
// runtime's per-device queue still lets the caller's thread run ahead. The device is
// ExecutionContext::local_device (0 without a context).
//
// Errors at compile: InvalidArgument for a program that fails verification, has symbolic shapes or holds a
// shard_map; Unimplemented as above; the code generator's and assembler's errors. At execute: InvalidArgument
// for arguments of the wrong count, type, platform or device; ResourceExhausted when device memory runs out;
// the driver's errors naming the device.
// Thread-safety: immutable after compile, except per-device state (loaded modules, uploaded constants) made on
// first use under a mutex; execute() may run concurrently on several devices.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <vector>

#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/backend/cuda/cuda_device_buffer.h"
#include "mcx/core/mutex.h"
#include "mcx/ir/program.h"
#include "mcx/platform/executable.h"

namespace mcx::cuda {

// The GPUs of this process, by local index (made once by the platform, alive for the process).
using CudaDevices = std::vector<std::unique_ptr<CudaDevice>>;

// The architecture that stands for the host emulating the GPU (MCX_CUDA_KERNEL_TARGET=host, docs/gpu.md):
// kernels are compiled to host bitcode, which only the stand-in driver of the tests runs.
inline constexpr int kHostEmulationArch = 0;
// How cuModuleLoadData is given host bitcode (which does not state its own length): this magic, the bitcode's
// length (u64, little-endian), the bitcode.
inline constexpr std::string_view kHostKernelImageMagic = "MCXHOSTK";

// "sm_90", or "host emulation" for kHostEmulationArch.
std::string arch_name(int arch);

// What a kernel of an executable was compiled into.
enum class KernelImageFormat : uint8_t {
  kCubin,        // assembled for the architecture
  kPtx,          // no assembler was found: the driver compiles it at load
  kHostBitcode,  // for kHostEmulationArch
};
struct CompiledKernel {
  std::string name;
  std::string image;
  KernelImageFormat format = KernelImageFormat::kCubin;
};

class CudaExecutable final : public Executable {
 public:
  struct Plan;

  // `program` for `devices` (all of architecture sm_<arch>, or kHostEmulationArch).
  static absl::StatusOr<std::shared_ptr<const CudaExecutable>> compile(const ir::Program& program,
                                                                       const CudaDevices& devices, int arch);
  // Reads what serialize() wrote: the program is planned again (no code generated) and the stored kernels
  // loaded. FailedPrecondition for bytes of another format, of another architecture than sm_<arch>, or whose
  // kernels do not match this build's plan (the caller compiles instead); InvalidArgument for damaged bytes.
  static absl::StatusOr<std::shared_ptr<const CudaExecutable>> deserialize(std::string_view bytes,
                                                                           const CudaDevices& devices, int arch);
  ~CudaExecutable() override;

  std::string_view platform() const override { return kCudaPlatformName; }
  const ir::Program& program() const override;
  bool has_collectives() const override { return false; }
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> execute(
      std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const override;
  // The program's canonical encoding, the architecture, every kernel's image and its format, and the
  // control-flow regions' executables, serialised.
  absl::StatusOr<std::string> serialize() const override;

  const std::vector<CompiledKernel>& kernels() const { return kernels_; }

 private:
  // Per device: the loaded modules and functions (parallel to kernels_), the constants in its memory.
  struct DeviceState {
    std::vector<CUmodule> modules;
    std::vector<CUfunction> functions;
    std::map<ir::ValueId, std::shared_ptr<DeviceMemory>> constants;
  };

  // The executables of each control-flow op's regions (Plan::control_flows' order; ControlFlowOp::regions()).
  using RegionExecutables = std::vector<std::vector<std::shared_ptr<const CudaExecutable>>>;

  CudaExecutable(const CudaDevices& devices, int arch, std::unique_ptr<Plan> plan, std::vector<CompiledKernel> kernels,
                 RegionExecutables regions);
  absl::StatusOr<const DeviceState*> state_on(const CudaDevice& device, absl::Time deadline) const;

  const CudaDevices& devices_;
  const int arch_;
  std::unique_ptr<const Plan> plan_;
  const std::vector<CompiledKernel> kernels_;
  const RegionExecutables regions_;
  mutable Mutex mu_;
  mutable std::map<int, std::unique_ptr<DeviceState>> states_ ABSL_GUARDED_BY(mu_);  // by device ordinal
};

}  // namespace mcx::cuda
