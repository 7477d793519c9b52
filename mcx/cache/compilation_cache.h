// The persistent compilation cache: compiled artifacts kept in a directory across processes, runs and nodes,
// one file per key ("<key hex>.mcxc", entry.h), as JAX's persistent cache, and better where its users were
// hurt: every entry has a header and checksums (a bad entry is a miss that is logged and removed, never
// loaded), writes are atomic (temp file + fsync + rename; an orphaned temp file never blocks a later write),
// any number of processes may read and write one directory at once, every process may write (not only
// process 0; see CacheOptions::writers), and a miss can say why (MCX_EXPLAIN_CACHE_MISSES).
//
//   auto cache = mcx::cache::CompilationCache::open({.directory = "/shared/mcx-cache"});
//   if (auto hit = (*cache)->get(key); hit.ok()) load(*hit); else { compile(); (*cache)->put(key, bytes, t); }
//
// Eviction: after a write, while the directory holds more than max_bytes of entries, the least recently used
// go (a hit sets the entry's modification time: no entry is rewritten on a hit). Read-only mode never
// writes, evicts or touches. The directory is trusted input (docs/security.md): checksums guard against
// corruption, not a malicious writer; a directory other users may write is refused unless
// allow_shared_writers.
// Thread-safety: all methods are thread-safe (stats under a mutex; the file system arbitrates the rest).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/cache/cache_key.h"
#include "mcx/cache/cache_options.h"
#include "mcx/cache/entry.h"

namespace mcx::cache {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t corrupt_entries = 0;  // bad entries found (each also a miss; removed unless read-only)
  int64_t writes = 0;
  int64_t skipped_writes = 0;  // by policy: thresholds, read-only, writer role
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t evictions = 0;
  absl::Duration compile_time_saved;  // sum of the compile times recorded in the entries hit
};

struct EntryInfo {
  std::string key_hex;
  std::string path;
  int64_t file_bytes = 0;
  absl::Time last_used;  // the file's modification time
  std::optional<EntryHeader> header;  // nullopt when the header does not verify
  absl::Status status;                // why the header (or, from verify(), the entry) is bad
};

class CompilationCache {
 public:
  // Creates the directory if needed. InvalidArgument when options.directory is empty (the cache is off:
  // callers check enabled() of the resolved options first), FailedPrecondition for a directory other users
  // may write (unless allow_shared_writers) or one that is not a directory; the options' flag errors.
  static absl::StatusOr<std::unique_ptr<CompilationCache>> open(CacheOptions options);

  // The payload stored under key. NotFound on a miss (with MCX_EXPLAIN_CACHE_MISSES its message lists which
  // key components differ from the nearest entry's; the same text is logged at info level). A corrupt entry
  // is a miss: logged at warning level, removed (unless read-only), counted. In strict mode (options.strict)
  // a corrupt entry is DataLoss (the entry kept) and a file that cannot be read is its error.
  absl::StatusOr<std::string> get(const CacheKey& key);

  // Writes payload under key unless the policy skips it (returns false then: read-only, writer role,
  // below the compile-time or size threshold). Then evicts down to max_bytes. Errors: the file system's.
  absl::StatusOr<bool> put(const CacheKey& key, std::string_view payload, absl::Duration compile_time);
  // Whether put() could write an entry that took compile_time to make (writer role, read-only mode and the
  // compile-time threshold; the size threshold needs the payload). Lets a caller skip serialising what
  // would be declined; such a skip is counted as a skipped write.
  bool would_write(absl::Duration compile_time);

  // Maintenance (mcx-cache). list(): every entry with its header (unverified payloads); verify(): every
  // entry fully checked (status says why one is bad); prune(): evict least recently used entries down to
  // max_bytes and remove temp files older than an hour; returns the number of entries removed; clear():
  // remove every entry and temp file.
  absl::StatusOr<std::vector<EntryInfo>> list() const;
  absl::StatusOr<std::vector<EntryInfo>> verify() const;
  absl::StatusOr<int64_t> prune(int64_t max_bytes);
  absl::StatusOr<int64_t> clear();

  // What get() would say about why key misses: one line per differing component against the entry sharing
  // the most components, or "no entries".
  std::string explain_miss(const CacheKey& key) const;

  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }
  const std::string& directory() const { return *options_.directory; }
  std::string path_of(const std::string& key_hex) const;

 private:
  explicit CompilationCache(CacheOptions options) : options_(std::move(options)) {}
  bool may_write() const;
  void count(const std::function<void(CacheStats&)>& update);

  CacheOptions options_;  // resolved: every field set
  mutable std::mutex mu_;
  CacheStats stats_;  // guarded by mu_
};

}  // namespace mcx::cache
