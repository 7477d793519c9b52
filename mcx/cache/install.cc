#include "mcx/cache/install.h"

#include <mutex>

#include "mcx/cache/compiled_entry_cache.h"
#include "mcx/core/error.h"

namespace mcx::cache {
namespace {

std::mutex g_mu;  // orders installs and uninstalls
std::shared_ptr<CompilationCache>* g_installed = new std::shared_ptr<CompilationCache>();  // guarded by g_mu

}  // namespace

absl::StatusOr<std::shared_ptr<CompilationCache>> install_compilation_cache(CacheOptions options) {
  MCX_ASSIGN_OR_RETURN(CacheOptions resolved, resolve_options(std::move(options)));
  if (!resolved.directory.has_value() || resolved.directory->empty()) return std::shared_ptr<CompilationCache>();
  MCX_ASSIGN_OR_RETURN(std::unique_ptr<CompilationCache> opened, CompilationCache::open(resolved));
  std::shared_ptr<CompilationCache> cache(std::move(opened));
  std::lock_guard<std::mutex> lock(g_mu);
  set_compiled_store(std::make_shared<CompiledEntryCache>(cache));
  *g_installed = cache;
  return cache;
}

void uninstall_compilation_cache() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!*g_installed) return;  // a store installed by other means stays
  set_compiled_store(nullptr);
  g_installed->reset();
}

std::shared_ptr<CompilationCache> installed_compilation_cache() {
  std::lock_guard<std::mutex> lock(g_mu);
  return *g_installed;
}

}  // namespace mcx::cache
