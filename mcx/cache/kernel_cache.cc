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
  MCX_RETURN_IF_ERROR(k.add("kind", kKindFusedKernel));
  MCX_RETURN_IF_ERROR(k.add("program", key.signature));
  MCX_RETURN_IF_ERROR(add_build_components(k, key.target));
  return k;
}

absl::Status add_build_components(CacheKey& k, std::string_view target) {
  MCX_RETURN_IF_ERROR(k.add("mcx_version", MCX_VERSION_STRING));
  if (target.empty()) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(std::string(target), "; ");
  const char* const kNames[] = {"llvm_version", "generator", "cpu", "cpu_features"};
  for (size_t i = 0; i < parts.size(); ++i) {
    MCX_RETURN_IF_ERROR(k.add(i < 4 ? kNames[i] : absl::StrCat("target_", i), parts[i]));
  }
  return absl::OkStatus();
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

}  // namespace mcx::cache
