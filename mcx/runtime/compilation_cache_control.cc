#include "mcx/runtime/compilation_cache_control.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/cache/install.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"

namespace mcx::compilation_cache {
namespace {

const Flag<bool> kEnabled("MCX_ENABLE_COMPILATION_CACHE", true,
                          "whether compiles use the persistent compilation cache (its directory kept)");

// What code has set; unset fields follow the environment.
struct Settings {
  Mutex mu;
  cache::CacheOptions overrides ABSL_GUARDED_BY(mu);
  std::optional<bool> enabled ABSL_GUARDED_BY(mu);
};

Settings& settings() {
  static auto* s = new Settings();  // never destroyed: compiles may run until the process exits
  return *s;
}

// Opens (or removes) the cache the settings describe. On an error nothing installed changes.
absl::Status install_settings(const cache::CacheOptions& overrides, const std::optional<bool>& enabled) {
  MCX_ASSIGN_OR_RETURN(bool on, kEnabled.resolve(enabled));
  if (!on) {
    cache::uninstall_compilation_cache();
    return absl::OkStatus();
  }
  MCX_ASSIGN_OR_RETURN(std::shared_ptr<cache::CompilationCache> opened, cache::install_compilation_cache(overrides));
  if (!opened) cache::uninstall_compilation_cache();  // no directory: off
  return absl::OkStatus();
}

// Sets one override through `edit` and applies the result; on an error the previous settings stay.
void change(const std::function<void(cache::CacheOptions&, std::optional<bool>&)>& edit) {
  Settings& s = settings();
  MutexLock lock(&s.mu);
  cache::CacheOptions overrides = s.overrides;
  std::optional<bool> enabled = s.enabled;
  edit(overrides, enabled);
  throw_if_error(install_settings(overrides, enabled));
  s.overrides = std::move(overrides);
  s.enabled = enabled;
}

}  // namespace

void set_cache_dir(const std::string& directory) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.directory = directory; });
}

std::string cache_dir() {
  std::shared_ptr<cache::CompilationCache> cache = cache::installed_compilation_cache();
  return cache ? cache->directory() : std::string();
}

void enable() {
  change([](cache::CacheOptions&, std::optional<bool>& e) { e = true; });
}

void disable() {
  change([](cache::CacheOptions&, std::optional<bool>& e) { e = false; });
}

bool is_enabled() {
  Settings& s = settings();
  MutexLock lock(&s.mu);
  return value_or_throw(kEnabled.resolve(s.enabled));
}

void set_min_compile_time_secs(double seconds) {
  if (!(seconds >= 0 && seconds <= 3600)) {
    throw_if_error(absl::InvalidArgumentError(
        absl::StrCat("[compilation_cache] set_min_compile_time_secs: expected seconds in [0, 3600], found ", seconds)));
  }
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.min_compile_time = absl::Seconds(seconds); });
}

void set_min_entry_size_bytes(int64_t bytes) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.min_entry_bytes = bytes; });
}

void set_max_size_bytes(int64_t bytes) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.max_bytes = bytes; });
}

void set_raise_persistent_cache_errors(bool strict) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.strict = strict; });
}

void set_check_contents(double fraction) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.check_contents = fraction; });
}

void set_custom_hook(std::function<std::string()> hook) {
  change([&](cache::CacheOptions& o, std::optional<bool>&) { o.custom_key = std::move(hook); });
}

void reset_cache() {
  Settings& s = settings();
  MutexLock lock(&s.mu);
  const int process_index = s.overrides.process_index;
  s.overrides = cache::CacheOptions{};
  s.overrides.process_index = process_index;
  s.enabled.reset();
  absl::Status status = install_settings(s.overrides, s.enabled);
  if (!status.ok()) {  // the environment's own cache cannot be opened: run without one, as at start
    log_warn("[cache] running without the compilation cache: {}", std::string(status.message()));
    cache::uninstall_compilation_cache();
  }
}

cache::CacheStats stats() {
  std::shared_ptr<cache::CompilationCache> cache = cache::installed_compilation_cache();
  return cache ? cache->stats() : cache::CacheStats{};
}

namespace detail {

absl::Status apply_for_process(int process_index) {
  Settings& s = settings();
  MutexLock lock(&s.mu);
  s.overrides.process_index = process_index;
  absl::Status status = install_settings(s.overrides, s.enabled);
  if (status.ok()) return status;
  absl::StatusOr<cache::CacheOptions> resolved = cache::resolve_options(s.overrides);
  if (resolved.ok() && *resolved->strict) return status;
  log_warn("[cache] running without the compilation cache: {}", std::string(status.message()));
  return absl::OkStatus();
}

}  // namespace detail
}  // namespace mcx::compilation_cache
