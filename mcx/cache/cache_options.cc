#include "mcx/cache/cache_options.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"

namespace mcx::cache {
namespace {

const Flag<std::string> kDir("MCX_COMPILATION_CACHE_DIR", "",
                             "directory of the persistent compilation cache; empty: off (mcx/cache)");
const Flag<int64_t> kMaxBytes("MCX_COMPILATION_CACHE_MAX_BYTES", int64_t{1} << 30,
                              "bytes the compilation cache directory keeps (least recently used entries go first)",
                              int_in_range(0, int64_t{1} << 50));
// 1 ms by default: reading an entry back costs ~0.1-0.2 ms (open, checksums, decompression, decoding), more
// than compiling eager dispatch's one-op programs, which would otherwise fill the directory.
const Flag<int64_t> kMinCompileMs("MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS", 1,
                                  "compiles faster than this many ms are not written to the cache",
                                  int_in_range(0, 3600 * 1000));
const Flag<int64_t> kMinEntryBytes("MCX_COMPILATION_CACHE_MIN_ENTRY_BYTES", 0,
                                   "compiled artifacts smaller than this are not written to the cache",
                                   int_in_range(0, int64_t{1} << 40));
const Flag<bool> kReadOnly("MCX_COMPILATION_CACHE_READ_ONLY", false,
                           "read the compilation cache but never write, evict or touch it");
const Flag<std::string> kWriters("MCX_COMPILATION_CACHE_WRITERS", "all",
                                 "which processes of a job write the compilation cache: all, process0 or none",
                                 [](const std::string& v) -> std::optional<std::string> {
                                   if (v == "all" || v == "process0" || v == "none") return std::nullopt;
                                   return "must be all, process0 or none";
                                 });
const Flag<bool> kAllowShared("MCX_COMPILATION_CACHE_ALLOW_SHARED_WRITERS", false,
                              "accept a compilation cache directory that other users may write (trusted input)");
const Flag<bool> kExplain("MCX_EXPLAIN_CACHE_MISSES", false,
                          "log, on a compilation cache miss, which key component differs from the nearest entry");

const Flag<bool> kStrict("MCX_RAISE_PERSISTENT_CACHE_ERRORS", false,
                         "fail a compile on a compilation cache problem (damaged entry, failed write, a stored "
                         "artifact differing from a fresh compile) instead of logging it");
const Flag<double> kCheckContents("MCX_COMPILATION_CACHE_CHECK_CONTENTS", 0.0,
                                  "fraction (0..1) of compilation cache hits compiled again and compared with the "
                                  "stored artifact",
                                  [](const double& v) -> std::optional<std::string> {
                                    if (v >= 0 && v <= 1) return std::nullopt;
                                    return "must be a fraction in [0, 1]";
                                  });

}  // namespace

absl::StatusOr<CacheOptions> resolve_options(CacheOptions o) {
  if (!o.directory) {
    MCX_ASSIGN_OR_RETURN(std::string dir, kDir.get());
    o.directory = dir;
  }
  MCX_ASSIGN_OR_RETURN(int64_t max_bytes, kMaxBytes.resolve(o.max_bytes));
  o.max_bytes = max_bytes;
  if (!o.min_compile_time) {
    MCX_ASSIGN_OR_RETURN(int64_t ms, kMinCompileMs.get());
    o.min_compile_time = absl::Milliseconds(ms);
  }
  MCX_ASSIGN_OR_RETURN(int64_t min_bytes, kMinEntryBytes.resolve(o.min_entry_bytes));
  o.min_entry_bytes = min_bytes;
  MCX_ASSIGN_OR_RETURN(bool read_only, kReadOnly.resolve(o.read_only));
  o.read_only = read_only;
  if (!o.writers) {
    MCX_ASSIGN_OR_RETURN(std::string w, kWriters.get());
    o.writers = w == "process0" ? CacheWriters::kProcess0 : w == "none" ? CacheWriters::kNone : CacheWriters::kAll;
  }
  MCX_ASSIGN_OR_RETURN(bool shared, kAllowShared.resolve(o.allow_shared_writers));
  o.allow_shared_writers = shared;
  MCX_ASSIGN_OR_RETURN(bool explain, kExplain.resolve(o.explain_misses));
  o.explain_misses = explain;
  MCX_ASSIGN_OR_RETURN(bool strict, kStrict.resolve(o.strict));
  o.strict = strict;
  MCX_ASSIGN_OR_RETURN(double check, kCheckContents.resolve(o.check_contents));
  o.check_contents = check;
  return o;
}

}  // namespace mcx::cache
