// Turns on the persistent compilation cache for this process when MCX_COMPILATION_CACHE_DIR (or
// compilation_cache::set_cache_dir) names a directory (docs/compilation_cache.md): executables and kernels
// are then loaded from it instead of compiled, and written to it when compiled. Called once when the devices
// are created. A directory that cannot be used (other users may write it, not a directory, a bad flag) is
// logged at warning level and the process runs without the cache: a cache is an optimisation, never a reason
// to fail, unless strict mode (MCX_RAISE_PERSISTENT_CACHE_ERRORS=1) asks for the error, which is returned.
//
// At exit, with MCX_LOG_LEVEL=info or lower, one line reports the cache's and the code generator's counts
// (hits, misses, kernels compiled and loaded, compile time saved).
#pragma once

#include "absl/status/status.h"

namespace mcx {

absl::Status setup_compilation_cache(int process_index);

}  // namespace mcx
