#include "mcx/cache/kernel_cache.h"

#include <vector>

#include "absl/strings/str_split.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

#ifndef MCX_VERSION_STRING
#define MCX_VERSION_STRING "unknown"
#endif

namespace mcx::cache {

absl::StatusOr<CacheKey> KernelCache::entry_key(const cpu::codegen::KernelKey& key) {
  CacheKey k;
  MCX_RETURN_IF_ERROR(k.add("kind", "fused_kernel"));
  MCX_RETURN_IF_ERROR(k.add("program", key.signature));
  MCX_RETURN_IF_ERROR(k.add("mcx_version", MCX_VERSION_STRING));
  // target_description(): "llvm <v>; generator <digest>; cpu <name>; <features>", one component each, so a
  // miss names which of them changed.
  std::vector<std::string> parts = absl::StrSplit(key.target, "; ");
  const char* const kNames[] = {"llvm_version", "generator", "cpu", "cpu_features"};
  for (size_t i = 0; i < parts.size(); ++i) {
    MCX_RETURN_IF_ERROR(k.add(i < 4 ? kNames[i] : absl::StrCat("target_", i), parts[i]));
  }
  return k;
}

std::optional<std::string> KernelCache::load(const cpu::codegen::KernelKey& key) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) {
    log_warn("[cache] kernel key: {}", std::string(k.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<std::string> payload = cache_->get(*k);
  if (!payload.ok()) return std::nullopt;  // a miss; a corrupt entry was logged and removed by get()
  return *std::move(payload);
}

void KernelCache::save(const cpu::codegen::KernelKey& key, std::string_view object, double compile_ms) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) return;
  absl::StatusOr<bool> written = cache_->put(*k, object, absl::Milliseconds(compile_ms));
  if (!written.ok()) log_warn("[cache] could not write a kernel: {}", std::string(written.status().message()));
}

absl::StatusOr<std::shared_ptr<KernelCache>> install_kernel_cache(CacheOptions options) {
  MCX_ASSIGN_OR_RETURN(CacheOptions resolved, resolve_options(std::move(options)));
  if (!resolved.directory.has_value() || resolved.directory->empty()) return std::shared_ptr<KernelCache>();
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<CompilationCache> cache, CompilationCache::open(resolved));
  auto store = std::make_shared<KernelCache>(std::shared_ptr<CompilationCache>(std::move(cache)));
  cpu::codegen::set_kernel_store(store);
  return store;
}

std::shared_ptr<KernelCache> installed_kernel_cache() {
  return std::dynamic_pointer_cast<KernelCache>(cpu::codegen::kernel_store());
}

}  // namespace mcx::cache
