// Turning the persistent compilation cache on for this process: one CompilationCache, installed as the
// compiled-code store (compiled_entry_cache.h) every platform's executables and kernels go through. The runtime calls install_compilation_cache() when the devices are made;
// programs (examples, tests) may call it with their own options.
// Thread-safety: thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "mcx/cache/cache_options.h"
#include "mcx/cache/compilation_cache.h"

namespace mcx::cache {

// Opens the cache that options (resolved against the MCX_COMPILATION_CACHE_* flags) describe and installs
// it as both stores (replacing any installed before). Returns the cache, or nullptr when no directory is
// configured (then nothing changes: stores installed before stay). Errors: those of CompilationCache::open
// (a directory other users may write, a bad flag value).
absl::StatusOr<std::shared_ptr<CompilationCache>> install_compilation_cache(CacheOptions options = {});

// Removes the installed cache as the store (compiles then use none); what was compiled stays in memory.
void uninstall_compilation_cache();

// The cache the last install_compilation_cache() installed, or nullptr.
std::shared_ptr<CompilationCache> installed_compilation_cache();

}  // namespace mcx::cache
