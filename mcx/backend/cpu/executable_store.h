// Where serialised executables (executable.h serialize/deserialize) are kept between processes. The backend
// defines the interface; the persistent compilation cache (mcx/cache, a layer above) implements it and the
// runtime installs it when a cache directory is configured (docs/compilation_cache.md). Without a store,
// load_or_compile() is CpuExecutable::compile().
//
// Thread-safety: every function here is thread-safe; a store's methods are called from any thread and must
// be thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

// What identifies a serialised executable: everything that decides what compile() makes of a program.
struct ExecutableKey {
  std::string program;  // ir::canonical_encoding of the program compiled
  std::string options;  // compile options: "codegen=0|1"
  std::string target;   // codegen::target_description() when generating code, else "interpreter"
  std::string format;   // CpuExecutable::format_description(): serialisation format and planner version
  // For a program partitioned over a mesh (runtime/spmd_executable.h): the mesh shape, axis names and
  // partition specs (never device ids, so every process of a job computes the same key); "" otherwise.
  std::string device_assignment;
};

// The key of `program` under the current setting, from its canonical encoding (the caller has it).
ExecutableKey executable_key(std::string canonical_encoding);

class ExecutableStore {
 public:
  virtual ~ExecutableStore() = default;
  // The serialised executable stored under key, or nullopt on a miss. A damaged entry is a miss (the store
  // logs and removes it).
  virtual std::optional<std::string> load(const ExecutableKey& key) = 0;
  // Keeps bytes under key (the store may decline by its own policy). compile_ms: what a hit saves. With a
  // device assignment the bytes are the runtime's SPMD entry (spmd_entry.h), else a serialised executable.
  virtual void save(const ExecutableKey& key, std::string_view bytes, double compile_ms) = 0;
  // Whether save() of an executable that took compile_ms (the parameter) to compile could be kept: when not, the caller
  // does not serialise it (eager dispatch's sub-millisecond compiles, a read-only store).
  virtual bool wants(double /*compile_ms*/) { return true; }
};

// Installs the store load_or_compile consults (nullptr: none).
void set_executable_store(std::shared_ptr<ExecutableStore> store);
std::shared_ptr<ExecutableStore> executable_store();

// The executable of program, whose ir::canonical_encoding the caller passes: read back from the installed
// store when it holds one under executable_key(canonical_encoding), else compiled and offered to the store.
// Without a store this is CpuExecutable::compile (no key is made). An entry that does not load (another
// format, a plan that does not fit) is logged at warning level and compiled instead: a store never makes a
// compile fail. Errors: those of CpuExecutable::compile.
absl::StatusOr<std::shared_ptr<const CpuExecutable>> load_or_compile(const ir::Program& program,
                                                                     std::string_view canonical_encoding);

// Process-wide counters (for stats and tests).
struct ExecutableStoreStats {
  int64_t loaded = 0;        // executables read back from the store
  int64_t compiled = 0;      // executables compiled (planned, kernels generated) because the store missed
  int64_t load_failures = 0; // entries that did not load (then compiled)
  int64_t offered = 0;       // executables offered to the store (its policy may decline to write them)
  double load_ms_total = 0;
};
ExecutableStoreStats executable_store_stats();

}  // namespace mcx::cpu
