// The persistent compilation cache as the CPU backend's executable store (backend/cpu/executable_store.h):
// every compiled executable is an entry holding its serialised form (plan, kernels' object code, program),
// so a later process (a restart, another process of the job, another node sharing the directory) reads it
// back instead of planning and generating code. docs/compilation_cache.md.
//
// Entry key components (each named in MCX_EXPLAIN_CACHE_MISSES output and `mcx-cache inspect`):
//   kind "executable" ("spmd_executable" for a program partitioned over a mesh); program: the canonical encoding
//   of the program compiled (ir/fingerprint.h); device_assignment (partitioned programs only: mesh shape,
//   axis names and partition specs, not device ids); options
//   (code generation on or off); executable_format (serialisation format and planner digest); mcx_version;
//   then the code generator's target as for kernels (llvm_version, generator, cpu, cpu_features), or
//   "target" = interpreter when no code is generated.
//
// Thread-safety: thread-safe (CompilationCache is).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/executable_store.h"
#include "mcx/cache/compilation_cache.h"

namespace mcx::cache {

class ExecutableEntryCache final : public cpu::ExecutableStore {
 public:
  explicit ExecutableEntryCache(std::shared_ptr<CompilationCache> cache) : cache_(std::move(cache)) {}

  std::optional<std::string> load(const cpu::ExecutableKey& key) override;
  void save(const cpu::ExecutableKey& key, std::string_view bytes, double compile_ms) override;
  bool wants(double compile_ms) override { return cache_->would_write(absl::Milliseconds(compile_ms)); }

  // The entry key for an executable (public for tests and tools).
  static absl::StatusOr<CacheKey> entry_key(const cpu::ExecutableKey& key);
  CompilationCache& cache() { return *cache_; }

 private:
  std::shared_ptr<CompilationCache> cache_;
};

}  // namespace mcx::cache
