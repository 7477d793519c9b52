// The key of a persistent compilation-cache entry: SHA-256 over named components, each itself a SHA-256
// digest (the canonical program, compile options, mcx version and build, code generator version, the CPU the
// code is for, the device assignment described by mesh shape, axis names and partition specs). Keeping the
// components, not only the key, lets a miss say which component differs from the nearest entry
// (MCX_EXPLAIN_CACHE_MISSES) and lets `mcx-cache inspect` show them.
//
//   CacheKey key;
//   MCX_RETURN_IF_ERROR(key.add("program", program_fingerprint_bytes));
//   MCX_RETURN_IF_ERROR(key.add("mcx_version", "0.1.0"));
//   std::string file = key.hex() + ".mcxc";
//
// The key depends on the components' names, digests and order. Thread-safety: a value type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "mcx/core/hash.h"

namespace mcx::cache {

struct CacheKeyComponent {
  std::string name;     // [a-z0-9_], at most 64 characters
  Sha256Digest digest;  // SHA-256 of the component's bytes
  bool operator==(const CacheKeyComponent&) const = default;
};

class CacheKey {
 public:
  // Adds a component: `bytes` are hashed. InvalidArgument unless the name is new and 1-64 characters of
  // [a-z0-9_].
  absl::Status add(std::string name, std::string_view bytes);
  // Adds a component whose digest is already known (e.g. read back from an entry's header).
  absl::Status add_digest(std::string name, const Sha256Digest& digest);

  const std::vector<CacheKeyComponent>& components() const { return components_; }
  Sha256Digest digest() const;  // SHA-256 over (name, digest) of every component, in order
  std::string hex() const;      // digest() in lower-case hex: the entry's file name stem

 private:
  std::vector<CacheKeyComponent> components_;
};

// The kinds of entry mcx writes: the bytes of each entry key's "kind" component.
// (compiled_entry_cache.h writes them; their names are the compiled-code store's kinds.)
inline constexpr std::string_view kKindFusedKernel = "fused_kernel";
inline constexpr std::string_view kKindExecutable = "executable";
inline constexpr std::string_view kKindSpmdExecutable = "spmd_executable";

// Which of the kinds above the "kind" component of components names (keys keep digests only, so this is
// a match against the known names), or "unknown" (no kind component, or another one).
std::string_view kind_name(const std::vector<CacheKeyComponent>& components);

// One line per component of `wanted` that `other` lacks or holds with another digest, e.g.
// "program: 3f2a9c1b0d4e (wanted) vs 77e1a0c2b9f3 (entry)", "llvm_version: not in the entry"; and per
// component only `other` has. Empty when they are equal.
std::vector<std::string> explain_difference(const std::vector<CacheKeyComponent>& wanted,
                                            const std::vector<CacheKeyComponent>& other);

}  // namespace mcx::cache
