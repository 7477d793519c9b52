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
//   target = interpreter); custom (only with a CacheOptions::custom_key hook: its string); mcx_version. A
//   different platform, mcx, LLVM, generator, CPU or custom string misses, never misloads.
//
// Thread-safety: thread-safe (CompilationCache is).
#pragma once

#include <atomic>
#include <cstdint>
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

  absl::StatusOr<std::optional<std::string>> load(const CompiledKey& key) override;
  absl::Status save(const CompiledKey& key, std::string_view bytes, double compile_ms) override;
  bool wants(double compile_ms) override { return cache_->would_write(absl::Milliseconds(compile_ms)); }
  // Samples hits at the options' check_contents fraction, evenly (with 0.25 every fourth hit is checked).
  bool check_this_hit() override;
  // Strict options: why, with the flag that relaxes it named; else logged, OkStatus.
  absl::Status problem(absl::Status why) override;

  // The entry key for a compiled key (public for tests and tools); `custom`, when not empty, is one more
  // component named "custom" before mcx_version (CacheOptions::custom_key). InvalidArgument for a component
  // name that is not [a-z0-9_] or appears twice.
  static absl::StatusOr<CacheKey> entry_key(const CompiledKey& key, std::string_view custom = "");
  CompilationCache& cache() { return *cache_; }

 private:
  // entry_key with the options' custom_key hook called (a hook that throws is an error, never an exception
  // out of the store).
  absl::StatusOr<CacheKey> key_of(const CompiledKey& key);

  std::shared_ptr<CompilationCache> cache_;
  std::atomic<int64_t> hits_seen_{0};
};

}  // namespace mcx::cache
