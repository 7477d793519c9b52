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
#include "mcx/cache/cache_options.h"
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

// Opens the cache that options (resolved against the MCX_COMPILATION_CACHE_* flags) describe and installs it
// as the kernel store (replacing any installed before). Returns the installed store, or nullptr when no
// directory is configured (then nothing changes: a store installed before stays). Errors: those of
// CompilationCache::open (a directory other users may write, a bad flag value).
absl::StatusOr<std::shared_ptr<KernelCache>> install_kernel_cache(CacheOptions options = {});

// The installed kernel store if it is a KernelCache (what install_kernel_cache installs), else nullptr.
std::shared_ptr<KernelCache> installed_kernel_cache();

}  // namespace mcx::cache
