#include "mcx/cache/compiled_entry_cache.h"

#include "mcx/core/error.h"
#include "mcx/core/logging.h"

#ifndef MCX_VERSION_STRING
#define MCX_VERSION_STRING "unknown"
#endif

namespace mcx::cache {

absl::StatusOr<CacheKey> CompiledEntryCache::entry_key(const CompiledKey& key) {
  CacheKey k;
  MCX_RETURN_IF_ERROR(k.add("kind", key.kind));
  MCX_RETURN_IF_ERROR(k.add("platform", key.platform));
  MCX_RETURN_IF_ERROR(k.add("program", key.program));
  if (!key.device_assignment.empty()) MCX_RETURN_IF_ERROR(k.add("device_assignment", key.device_assignment));
  for (const KeyComponent& c : key.build) MCX_RETURN_IF_ERROR(k.add(c.name, c.value));
  MCX_RETURN_IF_ERROR(k.add("mcx_version", MCX_VERSION_STRING));
  return k;
}

std::optional<std::string> CompiledEntryCache::load(const CompiledKey& key) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) {
    log_warn("[cache] {} key on {}: {}", key.kind, key.platform, std::string(k.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<std::string> payload = cache_->get(*k);
  if (!payload.ok()) return std::nullopt;  // a miss; a corrupt entry was logged and removed by get()
  return *std::move(payload);
}

void CompiledEntryCache::save(const CompiledKey& key, std::string_view bytes, double compile_ms) {
  absl::StatusOr<CacheKey> k = entry_key(key);
  if (!k.ok()) {
    log_warn("[cache] {} key on {}: {}", key.kind, key.platform, std::string(k.status().message()));
    return;
  }
  absl::StatusOr<bool> written = cache_->put(*k, bytes, absl::Milliseconds(compile_ms));
  if (!written.ok()) {
    log_warn("[cache] could not write a {} of {}: {}", key.kind, key.platform, std::string(written.status().message()));
  }
}

}  // namespace mcx::cache
