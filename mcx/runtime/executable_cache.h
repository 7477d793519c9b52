// Compiled executables, cached by platform and by the structure of the program.
//
// The key is program_key(): the program's canonical encoding (ir/fingerprint.h: op kinds, operand numbering,
// attributes including constant data bit for bit, parameter and result types, symbolic constraints), in the
// table of the platform and its current compile setting (Platform::compile_setting: e.g. code generation on or
// off). Two programs that differ only in their name share an entry; two platforms never do.
// A miss compiles, or reads the executable back from the persistent compilation cache when one is installed
// (platform/stored_compile.h; docs/compilation_cache.md). Compilation happens outside the lock; when two threads compile the same key at once, both compile and the
// first insert wins (the work is duplicated, never the entry). The lock is an mcx::Mutex
// (core/mutex.h) rather than absl::Mutex because Debian's abseil is not built with ThreadSanitizer
// annotations, so TSAN cannot see absl::Mutex and reports false races.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "absl/container/flat_hash_map.h"
#include "mcx/core/mutex.h"
#include "mcx/platform/executable.h"
#include "mcx/platform/platform.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/array_value.h"

namespace mcx {

// ir::canonical_encoding(program): equal keys imply programs that compute the same function on the same types.
std::string program_key(const ir::Program& program);

class ExecutableCache {
 public:
  using ExecutablePtr = std::shared_ptr<const Executable>;

  // The process-wide cache used by eager dispatch, jit and grad. Thread-safe.
  static ExecutableCache& global();

  // Returns the cached executable of program for platform, compiling it on a miss. Errors are those of
  // platform.compile (symbolic dims, verifier failures); failures are not cached.
  absl::StatusOr<ExecutablePtr> get_or_compile(const Platform& platform, const ir::Program& program);
  // Same with a caller-computed key (callers that already hold a cheaper unique key).
  absl::StatusOr<ExecutablePtr> get_or_compile(const Platform& platform, const std::string& key,
                                               const ir::Program& program);
  // For the default device's platform (device.h).
  absl::StatusOr<ExecutablePtr> get_or_compile(const ir::Program& program);

  int64_t size() const;
  int64_t hits() const;
  int64_t misses() const;
  void clear();

 private:
  mutable Mutex mu_;
  // One table per platform and compile setting (few: a linear search), so the key (which holds constants'
  // bytes) is not copied on this hot path.
  struct Table {
    const Platform* platform;
    uint64_t setting;
    absl::flat_hash_map<std::string, ExecutablePtr> entries;
  };
  std::vector<Table> tables_ ABSL_GUARDED_BY(mu_);
  Table& table_for(const Platform& platform, uint64_t setting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs exe on the arguments' values on the calling thread, through its platform, and wraps each result as a
// single-shard ArrayValue on the default device. Blocks until the results are computed. Errors are those of
// the platform's transfers and Executable::execute.
absl::StatusOr<std::vector<ArrayValue>> execute(const Executable& exe, std::span<const ArrayValue> args);

}  // namespace mcx
