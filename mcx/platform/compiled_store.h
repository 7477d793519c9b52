// Where compiled code is kept between processes: a platform's executables (serialised) and the kernels its
// code generator makes (object code). The platform layer defines the interface and the keys; the persistent
// compilation cache (mcx/cache, a layer above) implements it and installs itself when a cache directory is
// configured (docs/compilation_cache.md). Without a store every executable and kernel is compiled.
//
// A key names its platform and every input that decides what the compile makes, each as a named component,
// so a miss can say which one changed (MCX_EXPLAIN_CACHE_MISSES) and two platforms never share an entry.
//
// Thread-safety: set_compiled_store/compiled_store are thread-safe; a store's methods are called from any
// thread (kernels compile on thread pools) and must be thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx {

// What is stored under a key: the "kind" component of the key.
inline constexpr std::string_view kCompiledExecutable = "executable";           // Executable::serialize bytes
inline constexpr std::string_view kCompiledSpmdExecutable = "spmd_executable";  // the runtime's SPMD entry
inline constexpr std::string_view kCompiledKernel = "fused_kernel";             // a generated kernel's object code

// One named input of a compile: name in [a-z0-9_] (at most 64 characters), value any bytes.
struct KeyComponent {
  std::string name;
  std::string value;
  bool operator==(const KeyComponent&) const = default;
};

struct CompiledKey {
  std::string_view kind;  // one of the kinds above
  std::string platform;   // "cpu", "cuda", ...: Platform::name()
  std::string program;    // ir::canonical_encoding of the program, or a kernel's signature
  // For a program partitioned over a mesh: the mesh shape, axis names and partition specs (never device ids,
  // so every process of a job computes the same key); "" otherwise.
  std::string device_assignment;
  // What else decides the compile, in a fixed order: Platform::compile_key() for executables (options,
  // serialisation format, code generator target), the code generator's target for kernels.
  std::vector<KeyComponent> build;
};

class CompiledStore {
 public:
  virtual ~CompiledStore() = default;
  // The bytes stored under key, or nullopt on a miss. A damaged entry is a miss (the store logs and removes
  // it), unless the store is strict (MCX_RAISE_PERSISTENT_CACHE_ERRORS): then it is the error, which the
  // compile returns.
  virtual absl::StatusOr<std::optional<std::string>> load(const CompiledKey& key) = 0;
  // Keeps bytes under key (the store may decline by its own policy). compile_ms: what a hit saves. A failed
  // write is logged, or, when strict, returned.
  virtual absl::Status save(const CompiledKey& key, std::string_view bytes, double compile_ms) = 0;
  // Whether save() of something that took compile_ms to compile could be kept: when not, the caller does not
  // serialise it (eager dispatch's sub-millisecond compiles, a read-only store).
  virtual bool wants(double /*compile_ms*/) { return true; }
  // Whether this hit is to be checked (MCX_COMPILATION_CACHE_CHECK_CONTENTS): the caller then compiles again,
  // uses what it compiled, and reports a difference from the stored bytes through problem().
  virtual bool check_this_hit() { return false; }
  // What the caller does with a problem it met using the store (stored bytes that did not load, or that
  // differ from a fresh compile): a store logs it at warning level and returns OkStatus (the compile goes
  // on), or, when strict, returns it (the compile fails with it).
  virtual absl::Status problem(absl::Status why);
};

// Installs the store compiles consult (nullptr: none). What this process already compiled stays.
void set_compiled_store(std::shared_ptr<CompiledStore> store);
std::shared_ptr<CompiledStore> compiled_store();

}  // namespace mcx
