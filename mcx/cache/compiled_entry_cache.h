// The persistent compilation cache as the compiled-code store (platform/compiled_store.h): every executable a
// platform compiles, every partitioned program and every generated kernel is an entry, so a later process (a
// restart, another process of the job, another node sharing the directory) reads it back instead of
// partitioning, planning and generating code. docs/compilation_cache.md.
//
// Entry key components, in order (each named in MCX_EXPLAIN_CACHE_MISSES output and `mcx-cache inspect`):
//   kind ("executable", "spmd_executable" or "fused_kernel"); platform ("cpu", ...); program (the canonical
//   encoding of the program, or a kernel's signature); device_assignment (partitioned programs only: mesh
//   shape, axis names and partition specs, not device ids); the key's build components as the platform names
//   them (for the CPU: options, executable_format, then llvm_version, generator, cpu, cpu_features, or
//   target = interpreter); mcx_version. A different platform, mcx, LLVM, generator or CPU misses, never misloads.
//
// Thread-safety: thread-safe (CompilationCache is).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/cache/compilation_cache.h"
#include "mcx/platform/compiled_store.h"

namespace mcx::cache {

class CompiledEntryCache final : public CompiledStore {
 public:
  explicit CompiledEntryCache(std::shared_ptr<CompilationCache> cache) : cache_(std::move(cache)) {}

  std::optional<std::string> load(const CompiledKey& key) override;
  void save(const CompiledKey& key, std::string_view bytes, double compile_ms) override;
  bool wants(double compile_ms) override { return cache_->would_write(absl::Milliseconds(compile_ms)); }

  // The entry key for a compiled key (public for tests and tools). InvalidArgument for a component name
  // that is not [a-z0-9_] or appears twice.
  static absl::StatusOr<CacheKey> entry_key(const CompiledKey& key);
  CompilationCache& cache() { return *cache_; }

 private:
  std::shared_ptr<CompilationCache> cache_;
};

}  // namespace mcx::cache
