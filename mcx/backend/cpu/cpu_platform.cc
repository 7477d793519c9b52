#include "mcx/backend/cpu/cpu_platform.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/core/error.h"
#include "mcx/platform/platform_registry.h"

namespace mcx::cpu {
namespace {

// The host Buffer of a CPU buffer; InvalidArgument naming `what` for another platform's.
absl::StatusOr<const Buffer*> host_storage(const DeviceBuffer& b, std::string_view what) {
  if (const Buffer* host = b.host_buffer(); host != nullptr && b.platform() == kCpuPlatformName) return host;
  return absl::InvalidArgumentError(absl::StrCat("[cpu] ", std::string(what), " is a buffer of platform '",
                                                 std::string(b.platform()), "' (", b.describe(),
                                                 "); copy it to the cpu first"));
}

class CpuPlatform final : public Platform {
 public:
  std::string_view name() const override { return kCpuPlatformName; }
  absl::Status usable() const override { return absl::OkStatus(); }

  // options (code generation on or off), executable_format (serialisation format and planner digest), then the
  // code generator's target (codegen::target_components) or target = interpreter when no code is generated.
  std::vector<KeyComponent> compile_key() const override {
    const bool generate = codegen::enabled();
    std::vector<KeyComponent> key = {{"options", generate ? "codegen=1" : "codegen=0"},
                                     {"executable_format", CpuExecutable::format_description()}};
    if (!generate) {
      key.push_back({"target", "interpreter"});
      return key;
    }
    for (KeyComponent& c : codegen::target_components()) key.push_back(std::move(c));
    return key;
  }
  uint64_t compile_setting() const override { return codegen::enabled() ? 1 : 0; }

  KernelCompileStats kernel_stats() const override {
    const codegen::CodegenStats s = codegen::stats();
    return KernelCompileStats{s.kernels_compiled, s.kernels_loaded, s.kernels_from_peers,
                              s.kernel_reuses,    s.compile_ms_total, s.load_ms_total};
  }

  absl::StatusOr<std::shared_ptr<const Executable>> compile(const ir::Program& program) const override {
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const CpuExecutable> exe, CpuExecutable::compile(program));
    return std::make_shared<const CpuPlatformExecutable>(std::move(exe));
  }

  absl::StatusOr<std::shared_ptr<const Executable>> deserialize(std::string_view bytes) const override {
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const CpuExecutable> exe, CpuExecutable::deserialize(bytes));
    return std::make_shared<const CpuPlatformExecutable>(std::move(exe));
  }

  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> from_host(const Buffer& host, int local_device) const override {
    if (local_device < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("[cpu] expected a local device index >= 0, got ", local_device));
    }
    return std::make_shared<const CpuDeviceBuffer>(host);  // host memory: shared, not copied
  }

  absl::StatusOr<Buffer> to_host(const DeviceBuffer& buffer) const override {
    MCX_ASSIGN_OR_RETURN(const Buffer* host, host_storage(buffer, "to_host's argument"));
    return *host;
  }
};

}  // namespace

absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> CpuPlatformExecutable::execute(
    std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const {
  absl::InlinedVector<Buffer, 8> host_args;  // no allocation for up to 8 arguments: this runs for every op
  host_args.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat("[execute] argument ", i, " is null"));
    MCX_ASSIGN_OR_RETURN(const Buffer* host, host_storage(*args[i], absl::StrCat("argument ", i)));
    host_args.push_back(*host);
  }
  // Partitions running at once share the host's threads (thread_pool.h): each gets its share for its kernels.
  std::optional<ScopedIntraOpThreads> budget;
  if (ctx != nullptr) budget.emplace(std::max(1, num_threads() / std::max(1, ctx->local_partitions)));
  MCX_ASSIGN_OR_RETURN(std::vector<Buffer> results, exe_->execute(std::span<const Buffer>(host_args.data(), host_args.size()), ctx));
  std::vector<std::shared_ptr<const DeviceBuffer>> out;
  out.reserve(results.size());
  for (Buffer& r : results) out.push_back(std::make_shared<const CpuDeviceBuffer>(std::move(r)));
  return out;
}

std::unique_ptr<Platform> make_cpu_platform() { return std::make_unique<CpuPlatform>(); }

absl::Status register_cpu_platform() {
  static const absl::Status registered = register_platform(
      std::string(kCpuPlatformName), kCpuPlatformPriority,
      []() -> absl::StatusOr<std::unique_ptr<Platform>> { return make_cpu_platform(); });
  return registered;
}

}  // namespace mcx::cpu
