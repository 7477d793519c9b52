// Policy of the persistent compilation cache: each knob is a typed flag with an MCX_* variable
// (docs/config.md) and a field here; options_from_env() fills the unset fields from the environment.
//
//   MCX_COMPILATION_CACHE_DIR                   directory; empty: the cache is off (default)
//   MCX_COMPILATION_CACHE_MAX_BYTES             total size kept; least recently used entries go first (1 GiB)
//   MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS   compiles faster than this are not written (1)
//   MCX_COMPILATION_CACHE_MIN_ENTRY_BYTES       payloads smaller than this are not written (0)
//   MCX_COMPILATION_CACHE_READ_ONLY             read, never write, evict or touch (false)
//   MCX_COMPILATION_CACHE_WRITERS               all | process0 | none: which processes of a job write (all)
//   MCX_COMPILATION_CACHE_ALLOW_SHARED_WRITERS  accept a directory other users may write (false)
//   MCX_EXPLAIN_CACHE_MISSES                    log, on a miss, which key component differs from the nearest
//                                               entry's (false)
//   MCX_RAISE_PERSISTENT_CACHE_ERRORS           strict mode: a damaged entry, a failed write or a stored artifact
//                                               that differs from a fresh compile fails the compile instead of
//                                               being logged (false; JAX's jax_raise_persistent_cache_errors)
//   MCX_COMPILATION_CACHE_CHECK_CONTENTS        fraction of hits, 0..1, compiled again and compared byte for byte
//                                               with the stored artifact (0)
// Not from the environment: custom_key, a hook whose string is one more key component ("custom"), as JAX's
// cache_key.custom_hook: a program that depends on something mcx cannot see keys its entries by it.
// Thread-safety: value types; options_from_env reads the environment.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx::cache {

enum class CacheWriters { kAll, kProcess0, kNone };

struct CacheOptions {
  std::optional<std::string> directory;
  std::optional<int64_t> max_bytes;
  std::optional<absl::Duration> min_compile_time;
  std::optional<int64_t> min_entry_bytes;
  std::optional<bool> read_only;
  std::optional<CacheWriters> writers;
  std::optional<bool> allow_shared_writers;
  std::optional<bool> explain_misses;
  std::optional<bool> strict;
  std::optional<double> check_contents;
  std::function<std::string()> custom_key;  // empty: no "custom" component
  int process_index = 0;  // this process's index in its job (CacheWriters::kProcess0)
};

// Every field set: the option where given, else its flag. InvalidArgument naming a bad variable.
absl::StatusOr<CacheOptions> resolve_options(CacheOptions options);

}  // namespace mcx::cache
