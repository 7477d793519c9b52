// The persistent compilation cache as the code generator's kernel store (backend/cpu/codegen/kernel_store.h):
// the object code of every generated kernel is an entry, so a later process (or another process of the
// job, or another node sharing the directory) links it instead of running LLVM. docs/compilation_cache.md.
//
// Entry key components (each named in MCX_EXPLAIN_CACHE_MISSES output and `mcx-cache inspect`):
//   kind "fused_kernel"; program: the group's signature (dtypes and ops, not dims: one kernel serves every
//   shape); mcx_version; llvm_version; generator: digest of the code generator's sources; cpu: the host CPU
//   name; cpu_features: its feature string. A different mcx, LLVM, generator or CPU misses, never misloads.
//
// Thread-safety: thread-safe (CompilationCache is).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/codegen/kernel_store.h"
#include "mcx/cache/compilation_cache.h"

namespace mcx::cache {

class KernelCache final : public cpu::codegen::KernelStore {
 public:
  explicit KernelCache(std::shared_ptr<CompilationCache> cache) : cache_(std::move(cache)) {}

  std::optional<std::string> load(const cpu::codegen::KernelKey& key) override;
  void save(const cpu::codegen::KernelKey& key, std::string_view object, double compile_ms) override;

  // The entry key for a kernel (public for tests and tools).
  static absl::StatusOr<CacheKey> entry_key(const cpu::codegen::KernelKey& key);
  CompilationCache& cache() { return *cache_; }

 private:
  std::shared_ptr<CompilationCache> cache_;
};

// Adds the components every entry made by this build for a code generator target has: mcx_version, then
// each part of target_description() ("llvm <v>; generator <digest>; cpu <name>; <features>") as its own
// component (llvm_version, generator, cpu, cpu_features), so a miss names which of them changed; an empty
// target adds mcx_version only.
absl::Status add_build_components(CacheKey& k, std::string_view target);

}  // namespace mcx::cache
