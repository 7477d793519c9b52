#include "mcx/cache/compiled_entry_cache.h"

#include <cmath>
#include <exception>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

#ifndef MCX_VERSION_STRING
#define MCX_VERSION_STRING "unknown"
#endif

namespace mcx::cache {

absl::StatusOr<CacheKey> CompiledEntryCache::entry_key(const CompiledKey& key, std::string_view custom) {
  CacheKey k;
  MCX_RETURN_IF_ERROR(k.add("kind", key.kind));
  MCX_RETURN_IF_ERROR(k.add("platform", key.platform));
  MCX_RETURN_IF_ERROR(k.add("program", key.program));
  if (!key.device_assignment.empty()) MCX_RETURN_IF_ERROR(k.add("device_assignment", key.device_assignment));
  for (const KeyComponent& c : key.build) MCX_RETURN_IF_ERROR(k.add(c.name, c.value));
  if (!custom.empty()) MCX_RETURN_IF_ERROR(k.add("custom", custom));
  MCX_RETURN_IF_ERROR(k.add("mcx_version", MCX_VERSION_STRING));
  return k;
}

absl::StatusOr<CacheKey> CompiledEntryCache::key_of(const CompiledKey& key) {
  std::string custom;
  if (const std::function<std::string()>& hook = cache_->options().custom_key) {
    try {
      custom = hook();
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("[cache] the custom key hook threw: ", e.what()));
    } catch (...) {
      return absl::InvalidArgumentError("[cache] the custom key hook threw a non-standard exception");
    }
  }
  absl::StatusOr<CacheKey> k = entry_key(key, custom);
  if (!k.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("[cache] ", std::string(key.kind), " key on ", key.platform, ": ", k.status().message()));
  }
  return k;
}

absl::StatusOr<std::optional<std::string>> CompiledEntryCache::load(const CompiledKey& key) {
  absl::StatusOr<CacheKey> k = key_of(key);
  if (!k.ok()) {
    MCX_RETURN_IF_ERROR(problem(k.status()));
    return std::nullopt;
  }
  absl::StatusOr<std::string> payload = cache_->get(*k);
  if (absl::IsNotFound(payload.status())) return std::nullopt;  // a miss; a corrupt entry was logged and removed
  if (!payload.ok()) return payload.status();                    // strict mode: get() logged nothing
  return *std::move(payload);
}

absl::Status CompiledEntryCache::save(const CompiledKey& key, std::string_view bytes, double compile_ms) {
  absl::StatusOr<CacheKey> k = key_of(key);
  if (!k.ok()) return problem(k.status());
  absl::StatusOr<bool> written = cache_->put(*k, bytes, absl::Milliseconds(compile_ms));
  if (!written.ok()) {
    return problem(absl::Status(written.status().code(), absl::StrCat("[cache] could not write a ", std::string(key.kind), " of ",
                                                                      key.platform, ": ", written.status().message())));
  }
  return absl::OkStatus();
}

bool CompiledEntryCache::check_this_hit() {
  const double fraction = *cache_->options().check_contents;
  if (fraction <= 0) return false;
  const int64_t n = hits_seen_.fetch_add(1) + 1;
  // Hit n is checked when the running count of checks due, floor(n * fraction), steps up at it.
  return std::floor(static_cast<double>(n) * fraction) > std::floor(static_cast<double>(n - 1) * fraction);
}

absl::Status CompiledEntryCache::problem(absl::Status why) {
  if (*cache_->options().strict) {
    return absl::Status(why.code(), absl::StrCat(why.message(), " (MCX_RAISE_PERSISTENT_CACHE_ERRORS=1; set it to 0 "
                                                                "to log cache problems and compile instead)"));
  }
  return CompiledStore::problem(std::move(why));
}

}  // namespace mcx::cache
