#include "mcx/platform/stored_compile.h"

#include <chrono>

#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"

namespace mcx {
namespace {

struct Counters {
  Mutex mu;
  ExecutableStoreStats stats ABSL_GUARDED_BY(mu);
};

Counters& counters() {
  static auto* c = new Counters();  // never destroyed: compiles may run until the process exits
  return *c;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CompiledKey executable_key(const Platform& platform, std::string canonical_encoding) {
  return CompiledKey{kCompiledExecutable, std::string(platform.name()), std::move(canonical_encoding),
                     /*device_assignment=*/"", platform.compile_key()};
}

absl::StatusOr<std::shared_ptr<const Executable>> load_or_compile(const Platform& platform, const ir::Program& program,
                                                                  std::string_view canonical_encoding) {
  std::shared_ptr<CompiledStore> store = compiled_store();
  if (!store) return platform.compile(program);
  // Only with a store: the key copies the encoding and asks the platform for its compile key.
  const CompiledKey key = executable_key(platform, std::string(canonical_encoding));
  Counters& c = counters();
  const auto t0 = std::chrono::steady_clock::now();
  if (std::optional<std::string> bytes = store->load(key)) {
    absl::StatusOr<std::shared_ptr<const Executable>> exe = platform.deserialize(*bytes);
    MutexLock lock(&c.mu);
    if (exe.ok()) {
      ++c.stats.loaded;
      c.stats.load_ms_total += ms_since(t0);
      return exe;
    }
    ++c.stats.load_failures;
    log_warn("[compile on {}] a stored executable of {} did not load, compiling it: {}", platform.name(),
             program.name, std::string(exe.status().message()));
  }
  const auto t1 = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = platform.compile(program);
  if (!exe.ok()) return exe;
  const double compile_ms = ms_since(t1);
  {
    MutexLock lock(&c.mu);
    ++c.stats.compiled;
  }
  if (!store->wants(compile_ms)) return exe;
  absl::StatusOr<std::string> bytes = (*exe)->serialize();
  if (!bytes.ok()) {
    log_warn("[compile on {}] could not serialise the executable of {}: {}", platform.name(), program.name,
             std::string(bytes.status().message()));
    return exe;
  }
  store->save(key, *bytes, compile_ms);
  MutexLock lock(&c.mu);
  ++c.stats.offered;
  return exe;
}

ExecutableStoreStats executable_store_stats() {
  Counters& c = counters();
  MutexLock lock(&c.mu);
  return c.stats;
}

}  // namespace mcx
