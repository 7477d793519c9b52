#include "mcx/backend/cpu/executable_store.h"

#include <chrono>
#include <mutex>

#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/core/logging.h"

namespace mcx::cpu {
namespace {

struct Registry {
  std::mutex mu;
  std::shared_ptr<ExecutableStore> store;  // guarded by mu
  ExecutableStoreStats stats;              // guarded by mu
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: used until the process exits
  return *r;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ExecutableKey executable_key(std::string canonical_encoding) {
  const bool generate = codegen::enabled();
  return ExecutableKey{std::move(canonical_encoding), generate ? "codegen=1" : "codegen=0",
                       generate ? codegen::target_description() : "interpreter",
                       CpuExecutable::format_description(), /*device_assignment=*/""};
}

void set_executable_store(std::shared_ptr<ExecutableStore> store) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.store = std::move(store);
}

std::shared_ptr<ExecutableStore> executable_store() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.store;
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> load_or_compile(const ir::Program& program,
                                                                     std::string_view canonical_encoding) {
  std::shared_ptr<ExecutableStore> store = executable_store();
  if (!store) return CpuExecutable::compile(program);
  // Only with a store: the key copies the encoding and asks the code generator for its target.
  const ExecutableKey key = executable_key(std::string(canonical_encoding));
  Registry& r = registry();
  const auto t0 = std::chrono::steady_clock::now();
  if (std::optional<std::string> bytes = store->load(key)) {
    absl::StatusOr<std::shared_ptr<const CpuExecutable>> exe = CpuExecutable::deserialize(*bytes);
    std::lock_guard<std::mutex> lock(r.mu);
    if (exe.ok()) {
      ++r.stats.loaded;
      r.stats.load_ms_total += ms_since(t0);
      return exe;
    }
    ++r.stats.load_failures;
    log_warn("[cpu_compile] a stored executable of {} did not load, compiling it: {}", program.name,
             std::string(exe.status().message()));
  }
  const auto t1 = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const CpuExecutable>> exe = CpuExecutable::compile(program);
  if (!exe.ok()) return exe;
  const double compile_ms = ms_since(t1);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.stats.compiled;
  }
  if (!store->wants(compile_ms)) return exe;
  absl::StatusOr<std::string> bytes = (*exe)->serialize();
  if (!bytes.ok()) {
    log_warn("[cpu_compile] could not serialise the executable of {}: {}", program.name,
             std::string(bytes.status().message()));
    return exe;
  }
  store->save(key, *bytes, compile_ms);
  std::lock_guard<std::mutex> lock(r.mu);
  ++r.stats.offered;
  return exe;
}

ExecutableStoreStats executable_store_stats() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.stats;
}

}  // namespace mcx::cpu
