// The persistent compilation cache from code (docs/compilation_cache.md, "From code"), as JAX's
// jax.experimental.compilation_cache module and its jax_* options. Each setter overrides the MCX_* variable it
// names and takes effect for the next compile, whether the devices exist yet or not (JAX's settings take
// effect only before the cache is first used, or after reset_cache):
//
//   mcx::compilation_cache::set_cache_dir("/shared/mcx-cache");       // JAX: set_cache_dir
//   mcx::compilation_cache::disable();  /* ... */  mcx::compilation_cache::enable();
//   mcx::compilation_cache::set_raise_persistent_cache_errors(true);  // tests: every cache problem is an error
//
// Settings are process-wide. Executables already compiled stay in this process's memory (a setting changes
// what later compiles read and write, never what already runs).
// Errors: mcx::Error: InvalidArgument for a value out of range (naming it and the range); a directory that
// cannot be used is FailedPrecondition (another user may write it, not a directory) and the previous settings
// stay in force.
// Thread-safety: thread-safe; a compile running meanwhile uses the cache installed when it began.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "mcx/cache/compilation_cache.h"

namespace mcx::compilation_cache {

// The directory (created, mode 0700, if missing); "" turns the cache off. MCX_COMPILATION_CACHE_DIR;
// JAX: set_cache_dir, jax_compilation_cache_dir.
void set_cache_dir(const std::string& directory);
// The directory compiles use now: "" when there is none or the cache is disabled.
std::string cache_dir();

// Whether compiles use the cache at all (the directory kept). MCX_ENABLE_COMPILATION_CACHE (default 1);
// JAX: jax_enable_compilation_cache.
void enable();
void disable();
bool is_enabled();

// Compiles faster than this are not written. MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS;
// JAX: jax_persistent_cache_min_compile_time_secs. 0..3600.
void set_min_compile_time_secs(double seconds);
// Artifacts smaller than this are not written. MCX_COMPILATION_CACHE_MIN_ENTRY_BYTES;
// JAX: jax_persistent_cache_min_entry_size_bytes.
void set_min_entry_size_bytes(int64_t bytes);
// Bytes the directory keeps (least recently used go first). MCX_COMPILATION_CACHE_MAX_BYTES;
// JAX: jax_compilation_cache_max_size.
void set_max_size_bytes(int64_t bytes);

// Strict mode: a damaged entry, a failed write, a stored artifact that does not load or differs from a fresh
// compile fails the compile (mcx::Error) instead of being logged. MCX_RAISE_PERSISTENT_CACHE_ERRORS;
// JAX: jax_raise_persistent_cache_errors.
void set_raise_persistent_cache_errors(bool strict);

// The fraction (0..1) of hits compiled again and compared byte for byte with the stored artifact; the fresh
// result is used, and a difference is a cache problem (logged and the entry replaced, or, strict, an error).
// MCX_COMPILATION_CACHE_CHECK_CONTENTS.
void set_check_contents(double fraction);

// A function whose string is one more component of every key ("custom"), called at each compile: a program
// that depends on something mcx cannot see (a library version, a site setting) keys its entries by it.
// nullptr: none. JAX: jax._src.cache_key.custom_hook.
void set_custom_hook(std::function<std::string()> hook);

// Forgets every setting made here: the next compile follows the environment again (JAX: reset_cache).
void reset_cache();

// The counters of the cache compiles use now (zeros when none); each setting opens it afresh.
cache::CacheStats stats();

}  // namespace mcx::compilation_cache

namespace mcx::compilation_cache::detail {

// For the runtime (compilation_cache_setup.h): records this process's index (the writer role) and opens the
// cache the settings and the environment describe. A cache that cannot be opened is logged at warning level
// and the process runs without one, unless strict mode is on: then the error is returned.
absl::Status apply_for_process(int process_index);

}  // namespace mcx::compilation_cache::detail
