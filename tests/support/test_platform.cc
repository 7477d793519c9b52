#include "tests/support/test_platform.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/platform/platform_registry.h"

namespace mcx::test {
namespace {

constexpr std::string_view kMagic = "MCXTEST1";
constexpr int kTestPlatformPriority = -1;

std::atomic<int64_t> g_host_to_device{0};
std::atomic<int64_t> g_device_to_host{0};
std::atomic<int64_t> g_compiles{0};
std::atomic<int64_t> g_executions{0};

// Storage the runtime cannot address: only the test platform reads it.
class TestBuffer final : public DeviceBuffer {
 public:
  explicit TestBuffer(Buffer storage) : storage_(std::move(storage)) {}
  std::string_view platform() const override { return kTestPlatformName; }
  DType dtype() const override { return storage_.dtype(); }
  const std::vector<int64_t>& dims() const override { return storage_.dims(); }
  const Buffer* host_buffer() const override { return nullptr; }
  const Buffer& storage() const { return storage_; }

 private:
  Buffer storage_;
};

absl::StatusOr<const TestBuffer*> test_buffer(const DeviceBuffer* b, std::string_view what) {
  if (b == nullptr) return absl::InvalidArgumentError(absl::StrCat("[test] ", std::string(what), " is null"));
  if (b->platform() != kTestPlatformName) {
    return absl::InvalidArgumentError(absl::StrCat("[test] ", std::string(what), " is a buffer of platform '",
                                                   std::string(b->platform()), "' (", b->describe(),
                                                   "); expected one of platform 'test'"));
  }
  return static_cast<const TestBuffer*>(b);
}

absl::StatusOr<const Platform*> cpu() {
  MCX_ASSIGN_OR_RETURN(Platform * p, find_platform("cpu"));
  return p;
}

class TestExecutable final : public Executable {
 public:
  explicit TestExecutable(std::shared_ptr<const Executable> inner) : inner_(std::move(inner)) {}
  std::string_view platform() const override { return kTestPlatformName; }
  const ir::Program& program() const override { return inner_->program(); }
  bool has_collectives() const override { return inner_->has_collectives(); }

  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> execute(
      std::span<const DeviceBuffer* const> args, const ExecutionContext* ctx) const override {
    MCX_ASSIGN_OR_RETURN(const Platform* host, cpu());
    // The "device" runs its kernels on the storage in place: the CPU platform's buffers share it.
    std::vector<std::shared_ptr<const DeviceBuffer>> inner_args;
    std::vector<const DeviceBuffer*> ptrs;
    for (size_t i = 0; i < args.size(); ++i) {
      MCX_ASSIGN_OR_RETURN(const TestBuffer* b, test_buffer(args[i], absl::StrCat("argument ", i)));
      MCX_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceBuffer> shared, host->from_host(b->storage(), 0));
      ptrs.push_back(shared.get());
      inner_args.push_back(std::move(shared));
    }
    ++g_executions;
    MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceBuffer>> outs, inner_->execute(ptrs, ctx));
    std::vector<std::shared_ptr<const DeviceBuffer>> results;
    for (const auto& o : outs) {
      MCX_ASSIGN_OR_RETURN(Buffer storage, host->to_host(*o));
      results.push_back(std::make_shared<const TestBuffer>(std::move(storage)));
    }
    return results;
  }

  absl::StatusOr<std::string> serialize() const override {
    MCX_ASSIGN_OR_RETURN(std::string inner, inner_->serialize());
    return absl::StrCat(std::string(kMagic), inner);
  }

 private:
  std::shared_ptr<const Executable> inner_;
};

class TestPlatform final : public Platform {
 public:
  std::string_view name() const override { return kTestPlatformName; }
  absl::Status usable() const override { return cpu().status(); }

  std::vector<KeyComponent> compile_key() const override {
    absl::StatusOr<const Platform*> host = cpu();
    std::vector<KeyComponent> key = {{"test_format", std::string(kMagic)}};
    if (host.ok()) {
      for (KeyComponent& c : (*host)->compile_key()) key.push_back(std::move(c));
    }
    return key;
  }
  uint64_t compile_setting() const override {
    absl::StatusOr<const Platform*> host = cpu();
    return host.ok() ? (*host)->compile_setting() : 0;
  }

  absl::StatusOr<std::shared_ptr<const Executable>> compile(const ir::Program& program) const override {
    MCX_ASSIGN_OR_RETURN(const Platform* host, cpu());
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> inner, host->compile(program));
    ++g_compiles;
    return std::make_shared<const TestExecutable>(std::move(inner));
  }

  absl::StatusOr<std::shared_ptr<const Executable>> deserialize(std::string_view bytes) const override {
    if (bytes.substr(0, kMagic.size()) != kMagic) {
      return absl::FailedPreconditionError("[test] expected a test-platform executable (magic \"MCXTEST1\")");
    }
    MCX_ASSIGN_OR_RETURN(const Platform* host, cpu());
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<const Executable> inner, host->deserialize(bytes.substr(kMagic.size())));
    return std::make_shared<const TestExecutable>(std::move(inner));
  }

  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> from_host(const Buffer& host, int local_device) const override {
    if (local_device < 0) {
      return absl::InvalidArgumentError(absl::StrCat("[test] expected a local device index >= 0, got ", local_device));
    }
    ++g_host_to_device;
    return std::make_shared<const TestBuffer>(host.copy());
  }

  absl::StatusOr<Buffer> to_host(const DeviceBuffer& buffer) const override {
    MCX_ASSIGN_OR_RETURN(const TestBuffer* b, test_buffer(&buffer, "to_host's argument"));
    ++g_device_to_host;
    return b->storage().copy();
  }
};

}  // namespace

TestPlatformCounts test_platform_counts() {
  return {g_host_to_device.load(), g_device_to_host.load(), g_compiles.load(), g_executions.load()};
}

absl::Status register_test_platform() {
  static const absl::Status registered = register_platform(
      std::string(kTestPlatformName), kTestPlatformPriority,
      []() -> absl::StatusOr<std::unique_ptr<Platform>> { return std::make_unique<TestPlatform>(); });
  return registered;
}

}  // namespace mcx::test
