// Compiling through the compiled-code store (compiled_store.h): an executable is read back from the installed
// store when it holds one for this platform, program and compile key, else compiled and offered to the store.
// Any platform's executables go through here; the platform supplies compile(), deserialize() and the key.
//
// Thread-safety: every function is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"
#include "mcx/platform/compiled_store.h"
#include "mcx/platform/executable.h"
#include "mcx/platform/platform.h"

namespace mcx {

// The store key of an executable of `platform` for the program whose canonical encoding is given: kind
// "executable", the platform's name and its compile_key().
CompiledKey executable_key(const Platform& platform, std::string canonical_encoding);

// The executable of program (whose ir::canonical_encoding the caller passes) for platform. Without a store
// this is platform.compile(program) and no key is made. An entry that does not load (another format, a plan
// that does not fit) is the store's problem(): logged and compiled instead, unless the store is strict. A hit
// the store asks to check (check_this_hit) is compiled again; the fresh executable is used, and bytes that
// differ from the stored ones are a problem() too (the fresh bytes replace them).
// Errors: those of platform.compile; a strict store's problems.
absl::StatusOr<std::shared_ptr<const Executable>> load_or_compile(const Platform& platform, const ir::Program& program,
                                                                  std::string_view canonical_encoding);

// Process-wide counters of load_or_compile over every platform (for stats and tests).
struct ExecutableStoreStats {
  int64_t loaded = 0;         // executables read back from the store
  int64_t compiled = 0;       // executables compiled because the store missed
  int64_t load_failures = 0;  // entries that did not load (then compiled)
  int64_t offered = 0;        // executables offered to the store (its policy may decline to write them)
  int64_t checked = 0;          // hits compiled again to compare (check_this_hit)
  int64_t check_mismatches = 0;  // of those, stored bytes that differed from the fresh compile's
  double load_ms_total = 0;
};
ExecutableStoreStats executable_store_stats();

// The index of the first byte where a and b differ (the shorter one's size when one is a prefix of the other).
size_t first_difference(std::string_view a, std::string_view b);

}  // namespace mcx
