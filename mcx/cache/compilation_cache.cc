#include "mcx/cache/compilation_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::cache {
namespace {

namespace fs = std::filesystem;

constexpr char kSuffix[] = ".mcxc";
constexpr size_t kSuffixLength = sizeof(kSuffix) - 1;
constexpr char kTempPrefix[] = ".tmp-";
constexpr absl::Duration kStaleTemp = absl::Hours(1);

absl::Status errno_status(int err, const char* what, const std::string& path) {
  const std::string message = absl::StrCat("[cache] ", what, " '", path, "': ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

// Reads at most `limit` bytes from the start of the file (all of it when limit is npos).
absl::StatusOr<std::string> read_file(const std::string& path, size_t limit = std::string::npos) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open", path);
  std::string out;
  char buf[1 << 16];
  while (out.size() < limit) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof buf, limit - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return errno_status(err, "cannot read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Writes bytes to dir/name through a unique temp file, fsync, rename and a directory fsync: readers see the
// old file, nothing, or the whole new one; a crash leaves at most a temp file (removed by prune()).
absl::Status write_atomically(const std::string& dir, const std::string& name, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  int fd = -1;
  // A name taken by an orphan (a writer with this pid that died) is skipped, never waited for.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp = absl::StrCat(dir, "/", kTempPrefix, name, "-", ::getpid(), "-", counter.fetch_add(1));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return errno_status(errno, "cannot create", temp);
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    return errno_status(err, what, temp);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("cannot fsync");
  ::close(fd);
  const std::string final_path = absl::StrCat(dir, "/", name);
  if (::rename(temp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return errno_status(err, "cannot rename into", final_path);
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

absl::Time mtime_of(const struct stat& st) { return absl::TimeFromTimespec(st.st_mtim); }

struct DirEntry {
  std::string name, path;
  bool is_temp = false;
  int64_t bytes = 0;
  absl::Time mtime;
};

// The entries and temp files of dir (other files are left alone).
absl::StatusOr<std::vector<DirEntry>> scan(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("[cache] cannot list '", dir, "': ", ec.message()));
  std::vector<DirEntry> out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return absl::InternalError(absl::StrCat("[cache] cannot list '", dir, "': ", ec.message()));
    const std::string name = it->path().filename().string();
    const bool is_temp = name.rfind(kTempPrefix, 0) == 0;
    const bool is_entry = name.size() == 64 + kSuffixLength && name.ends_with(kSuffix);
    if (!is_temp && !is_entry) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone meanwhile
    out.push_back({name, it->path().string(), is_temp, static_cast<int64_t>(st.st_size), mtime_of(st)});
  }
  return out;
}

// Header of an entry file (reads only the header's bytes).
absl::StatusOr<EntryHeader> read_header(const DirEntry& e) {
  MCX_ASSIGN_OR_RETURN(std::string prefix, read_file(e.path, 64 << 10));
  absl::StatusOr<EntryHeader> h = decode_entry_header(prefix, e.name, static_cast<uint64_t>(e.bytes));
  if (h.ok() || prefix.size() < (64u << 10)) return h;
  MCX_ASSIGN_OR_RETURN(std::string all, read_file(e.path));  // a header over 64 KiB: many components
  return decode_entry_header(all, e.name, static_cast<uint64_t>(e.bytes));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompilationCache>> CompilationCache::open(CacheOptions options) {
  MCX_ASSIGN_OR_RETURN(CacheOptions o, resolve_options(std::move(options)));
  if (o.directory->empty()) {
    return absl::InvalidArgumentError("[cache] expected a directory (MCX_COMPILATION_CACHE_DIR), found none: the cache is off");
  }
  std::error_code ec;
  fs::create_directories(*o.directory, ec);
  struct stat st;
  if (::stat(o.directory->c_str(), &st) != 0) return errno_status(errno, "cannot use the directory", *o.directory);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("[cache] '", *o.directory, "' is not a directory"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !*o.allow_shared_writers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[cache] the directory '", *o.directory, "' is writable by other users (mode ",
        absl::StrFormat("%04o", st.st_mode & 07777),
        "); a compilation cache is trusted input: use a directory only you may write, or set "
        "MCX_COMPILATION_CACHE_ALLOW_SHARED_WRITERS=1 to accept it"));
  }
  return std::unique_ptr<CompilationCache>(new CompilationCache(std::move(o)));
}

std::string CompilationCache::path_of(const std::string& key_hex) const {
  return absl::StrCat(*options_.directory, "/", key_hex, kSuffix);
}

void CompilationCache::count(const std::function<void(CacheStats&)>& update) {
  std::lock_guard<std::mutex> lock(mu_);
  update(stats_);
}

CacheStats CompilationCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool CompilationCache::may_write() const {
  if (*options_.read_only) return false;
  switch (*options_.writers) {
    case CacheWriters::kAll: return true;
    case CacheWriters::kProcess0: return options_.process_index == 0;
    case CacheWriters::kNone: return false;
  }
  return false;
}

absl::StatusOr<std::string> CompilationCache::get(const CacheKey& key) {
  const std::string hex = key.hex();
  const std::string path = path_of(hex);
  absl::StatusOr<std::string> bytes = read_file(path);
  if (bytes.ok()) {
    EntryHeader header;
    absl::StatusOr<std::string> payload = decode_entry(*bytes, key.digest(), hex + std::string(kSuffix), &header);
    if (payload.ok()) {
      const absl::Duration saved = header.compile_time;
      if (!*options_.read_only) {
        const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};  // last use = modification time
        ::utimensat(AT_FDCWD, path.c_str(), times, 0);
      }
      const int64_t n = static_cast<int64_t>(bytes->size());
      count([&](CacheStats& s) {
        ++s.hits;
        s.bytes_read += n;
        s.compile_time_saved += saved;
      });
      return payload;
    }
    count([](CacheStats& s) { ++s.corrupt_entries; });
    if (*options_.strict) {  // kept for inspection (mcx-cache verify)
      return absl::DataLossError(absl::StrCat(payload.status().message(), " (strict mode: the entry is kept at '",
                                              path, "'; MCX_RAISE_PERSISTENT_CACHE_ERRORS=0 treats it as a miss)"));
    }
    log_warn("{}; the entry is treated as a miss{}", std::string(payload.status().message()),
             *options_.read_only ? "" : " and removed");
    if (!*options_.read_only) ::unlink(path.c_str());
  } else if (!absl::IsNotFound(bytes.status())) {
    if (*options_.strict) return bytes.status();
    log_warn("{}; treated as a miss", std::string(bytes.status().message()));
  }
  count([](CacheStats& s) { ++s.misses; });
  std::string why = absl::StrCat("[cache] miss: no valid entry ", hex);
  if (*options_.explain_misses) {
    const std::string explanation = explain_miss(key);
    log_info("[cache] miss {}: {}", hex.substr(0, 12), explanation);
    absl::StrAppend(&why, "; ", explanation);
  }
  return absl::NotFoundError(why);
}

bool CompilationCache::would_write(absl::Duration compile_time) {
  if (may_write() && compile_time >= *options_.min_compile_time) return true;
  count([](CacheStats& s) { ++s.skipped_writes; });
  return false;
}

absl::StatusOr<bool> CompilationCache::put(const CacheKey& key, std::string_view payload, absl::Duration compile_time) {
  if (!may_write() || compile_time < *options_.min_compile_time ||
      static_cast<int64_t>(payload.size()) < *options_.min_entry_bytes) {
    count([](CacheStats& s) { ++s.skipped_writes; });
    return false;
  }
  MCX_ASSIGN_OR_RETURN(std::string bytes, encode_entry(key, payload, compile_time, now_unix_ms()));
  MCX_RETURN_IF_ERROR(write_atomically(*options_.directory, key.hex() + std::string(kSuffix), bytes));
  count([&](CacheStats& s) {
    ++s.writes;
    s.bytes_written += static_cast<int64_t>(bytes.size());
  });
  MCX_ASSIGN_OR_RETURN(int64_t evicted, prune(*options_.max_bytes));
  (void)evicted;
  return true;
}

absl::StatusOr<std::vector<EntryInfo>> CompilationCache::list() const {
  MCX_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, scan(*options_.directory));
  std::vector<EntryInfo> out;
  for (const DirEntry& e : entries) {
    if (e.is_temp) continue;
    EntryInfo info{e.name.substr(0, 64), e.path, e.bytes, e.mtime, std::nullopt, absl::OkStatus()};
    absl::StatusOr<EntryHeader> h = read_header(e);
    if (h.ok()) {
      if (to_hex(h->key) != info.key_hex) {
        info.status = absl::DataLossError(absl::StrCat("[cache] ", e.name, ": holds key ", to_hex(h->key)));
      }
      info.header = *std::move(h);
    } else {
      info.status = h.status();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.last_used > b.last_used; });
  return out;
}

absl::StatusOr<std::vector<EntryInfo>> CompilationCache::verify() const {
  MCX_ASSIGN_OR_RETURN(std::vector<EntryInfo> entries, list());
  for (EntryInfo& e : entries) {
    if (!e.status.ok() || !e.header) continue;
    absl::StatusOr<std::string> bytes = read_file(e.path);
    absl::Status s = bytes.status();
    if (bytes.ok()) s = decode_entry(*bytes, e.header->key, e.key_hex + std::string(kSuffix)).status();
    e.status = s;
  }
  return entries;
}

absl::StatusOr<int64_t> CompilationCache::prune(int64_t max_bytes) {
  if (*options_.read_only) return 0;
  MCX_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, scan(*options_.directory));
  const absl::Time now = absl::Now();
  int64_t total = 0, removed = 0;
  std::vector<const DirEntry*> by_age;
  for (const DirEntry& e : entries) {
    if (e.is_temp) {
      // A temp file of a write that died (kill -9, full disk); a live write finishes long before this age.
      if (now - e.mtime > kStaleTemp && ::unlink(e.path.c_str()) == 0) ++removed;
      continue;
    }
    total += e.bytes;
    by_age.push_back(&e);
  }
  std::sort(by_age.begin(), by_age.end(), [](const DirEntry* a, const DirEntry* b) { return a->mtime < b->mtime; });
  int64_t evicted = 0;
  for (const DirEntry* e : by_age) {
    if (total <= max_bytes) break;
    if (::unlink(e->path.c_str()) == 0) ++evicted;
    total -= e->bytes;  // gone either way (another process may have evicted it first)
  }
  count([&](CacheStats& s) { s.evictions += evicted; });
  return removed + evicted;
}

absl::StatusOr<int64_t> CompilationCache::clear() {
  MCX_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, scan(*options_.directory));
  int64_t removed = 0;
  for (const DirEntry& e : entries) {
    if (::unlink(e.path.c_str()) == 0) ++removed;
  }
  return removed;
}

std::string CompilationCache::explain_miss(const CacheKey& key) const {
  absl::StatusOr<std::vector<EntryInfo>> entries = list();
  if (!entries.ok()) return std::string(entries.status().message());
  const EntryInfo* nearest = nullptr;
  int best = -1;
  for (const EntryInfo& e : *entries) {
    if (!e.header) continue;
    int same = 0;
    for (const CacheKeyComponent& c : key.components()) {
      same += std::count(e.header->components.begin(), e.header->components.end(), c) > 0;
    }
    if (same > best) {
      best = same;
      nearest = &e;
    }
  }
  if (nearest == nullptr) return absl::StrCat("no entries in '", *options_.directory, "'");
  return absl::StrCat("nearest entry ", nearest->key_hex.substr(0, 12), " differs in ",
                      absl::StrJoin(explain_difference(key.components(), nearest->header->components), "; "));
}

}  // namespace mcx::cache
