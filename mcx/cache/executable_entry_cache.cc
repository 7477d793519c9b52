#include "mcx/cache/executable_entry_cache.h"

#include "mcx/cache/kernel_cache.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::cache {

absl::StatusOr<CacheKey> ExecutableEntryCache::entry_key(const cpu::ExecutableKey& key) {
  CacheKey k;
  MCX_RETURN_IF_ERROR(k.add("kind", key.device_assignment.empty() ? kKindExecutable : kKindSpmdExecutable));
  MCX_RETURN_IF_ERROR(k.add("program", key.program));
  if (!key.device_assignment.empty()) MCX_RETURN_IF_ERROR(k.add("device_assignment", key.device_assignment));
  MCX_RETURN_IF_ERROR(k.add("options", key.options));
  MCX_RETURN_IF_ERROR(k.add("executable_format", key.format));
  if (key.target == "interpreter") {
    MCX_RETURN_IF_ERROR(add_build_components(k, ""));
    MCX_RETURN_IF_ERROR(k.add("target", key.target));
  } else {
    MCX_RETURN_IF_ERROR(add_build_components(k, key.target));
  }
  return k;
}

std::optional<std::string> ExecutableEntryCache::load(const cpu::ExecutableKey& key) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) {
    log_warn("[cache] executable key: {}", std::string(k.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<std::string> payload = cache_->get(*k);
  if (!payload.ok()) return std::nullopt;  // a miss; a corrupt entry was logged and removed by get()
  return *std::move(payload);
}

void ExecutableEntryCache::save(const cpu::ExecutableKey& key, std::string_view bytes, double compile_ms) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) return;
  absl::StatusOr<bool> written = cache_->put(*k, bytes, absl::Milliseconds(compile_ms));
  if (!written.ok()) log_warn("[cache] could not write an executable: {}", std::string(written.status().message()));
}

}  // namespace mcx::cache
