// The persistent compilation cache's store (mcx/cache): entry format, checksums on every byte, atomic writes,
// policy (thresholds, read-only, writer roles, shared directories), LRU eviction, explained misses, concurrent
// writer processes killed with SIGKILL mid-write, and the mcx-cache tool.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/cache/compilation_cache.h"
#include "tests/support/temp_dir.h"

namespace mcx::cache {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

using test::TempDir;

CacheKey key_for(const std::string& program, const std::string& version = "0.1.0") {
  CacheKey k;
  EXPECT_TRUE(k.add("kind", kKindExecutable).ok());
  EXPECT_TRUE(k.add("program", program).ok());
  EXPECT_TRUE(k.add("mcx_version", version).ok());
  EXPECT_TRUE(k.add("cpu", "x86_64 avx2 fma").ok());
  return k;
}

std::unique_ptr<CompilationCache> open_cache(const std::string& dir, CacheOptions o = {}) {
  o.directory = dir;
  if (!o.explain_misses) o.explain_misses = true;
  auto c = CompilationCache::open(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

void set_mtime(const std::string& path, absl::Time t) {
  const timespec ts = absl::ToTimespec(t);
  const timespec times[2] = {ts, ts};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

TEST(CacheKey, NamedComponentsAndTheirDifferences) {
  const CacheKey a = key_for("p1"), b = key_for("p1"), c = key_for("p2"), d = key_for("p1", "0.2.0");
  EXPECT_EQ(a.hex(), b.hex());
  EXPECT_EQ(a.hex().size(), 64u);
  EXPECT_NE(a.hex(), c.hex());
  EXPECT_NE(a.hex(), d.hex());
  const std::vector<std::string> diff = explain_difference(d.components(), a.components());
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_THAT(diff[0], AllOf(HasSubstr("mcx_version: "), HasSubstr("(wanted) vs"), HasSubstr("(entry)")));
  CacheKey k;
  EXPECT_THAT(std::string(k.add("Bad-Name", "x").message()), HasSubstr("expected 1-64 characters of [a-z0-9_]"));
  ASSERT_TRUE(k.add("x", "1").ok());
  EXPECT_THAT(std::string(k.add("x", "2").message()), HasSubstr("added twice"));
}

TEST(CacheEntry, RoundTripsAndRecordsItsHeader) {
  const CacheKey key = key_for("p");
  const std::string payload(10000, 'a');
  const std::string bytes = *encode_entry(key, payload, absl::Milliseconds(250), 1234);
  EXPECT_LT(bytes.size(), payload.size());  // compressed
  EXPECT_EQ(*decode_entry(bytes, key.digest(), "e"), payload);
  const EntryHeader h = *decode_entry_header(bytes, "e", bytes.size());
  EXPECT_EQ(h.compile_time, absl::Milliseconds(250));
  EXPECT_EQ(h.created_unix_ms, 1234);
  EXPECT_EQ(h.payload_size, payload.size());
  EXPECT_EQ(h.components, key.components());
  // Another key's entry under this name is refused.
  EXPECT_THAT(std::string(decode_entry(bytes, key_for("q").digest(), "e").status().message()), HasSubstr("holds key"));
  EXPECT_THAT(std::string(decode_entry("garbage", key.digest(), "f.mcxc").status().message()),
              HasSubstr("[cache] f.mcxc: not an mcx cache entry"));
}

TEST(CompilationCache, HitMissAndStats) {
  TempDir dir;
  auto cache = open_cache(dir.path());
  const CacheKey key = key_for("p");
  absl::StatusOr<std::string> miss = cache->get(key);
  EXPECT_TRUE(absl::IsNotFound(miss.status()));
  EXPECT_THAT(std::string(miss.status().message()), HasSubstr("no entries in"));
  ASSERT_TRUE(*cache->put(key, "compiled bytes", absl::Milliseconds(40)));
  EXPECT_EQ(*cache->get(key), "compiled bytes");
  // Another process (a second cache object on the same directory) sees it.
  EXPECT_EQ(*open_cache(dir.path())->get(key), "compiled bytes");
  const CacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.writes, 1);
  EXPECT_EQ(s.compile_time_saved, absl::Milliseconds(40));
  EXPECT_GT(s.bytes_written, 0);
}

TEST(CompilationCache, AnotherVersionMissesAndTheMissSaysWhichComponentDiffers) {
  TempDir dir;
  auto cache = open_cache(dir.path());
  ASSERT_TRUE(*cache->put(key_for("p"), "old build", absl::Milliseconds(5)));
  absl::StatusOr<std::string> miss = cache->get(key_for("p", "0.2.0"));  // a new mcx version: a miss, not a load
  EXPECT_TRUE(absl::IsNotFound(miss.status()));
  EXPECT_THAT(std::string(miss.status().message()), AllOf(HasSubstr("differs in mcx_version:"), ::testing::Not(HasSubstr("program:"))));
}

// Every single-byte corruption and every truncation of an entry is a miss that is removed; the next write
// heals it.
TEST(CompilationCache, EveryCorruptedByteIsAMissThatHeals) {
  TempDir dir;
  auto cache = open_cache(dir.path());
  const CacheKey key = key_for("small");
  ASSERT_TRUE(*cache->put(key, "a small compiled program", absl::Milliseconds(1)));
  const std::string path = cache->path_of(key.hex());
  const std::string good = read_all(path);
  int64_t corrupt = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    write_all(path, bad);
    EXPECT_TRUE(absl::IsNotFound(cache->get(key).status())) << "byte " << i;
    EXPECT_FALSE(fs::exists(path)) << "byte " << i << ": the bad entry was not removed";
    ++corrupt;
  }
  for (size_t n = 0; n < good.size(); n += 7) {
    write_all(path, good.substr(0, n));
    EXPECT_TRUE(absl::IsNotFound(cache->get(key).status())) << "truncated to " << n;
    ++corrupt;
  }
  write_all(path, good + "x");
  EXPECT_TRUE(absl::IsNotFound(cache->get(key).status()));
  ++corrupt;
  EXPECT_EQ(cache->stats().corrupt_entries, corrupt);
  ASSERT_TRUE(*cache->put(key, "a small compiled program", absl::Milliseconds(1)));
  EXPECT_EQ(*cache->get(key), "a small compiled program");
}

TEST(CompilationCache, PolicyThresholdsReadOnlyAndWriterRoles) {
  TempDir dir;
  auto slow_only = open_cache(dir.path(), {.min_compile_time = absl::Milliseconds(100)});
  EXPECT_FALSE(*slow_only->put(key_for("fast"), "x", absl::Milliseconds(10)));
  EXPECT_TRUE(*slow_only->put(key_for("slow"), "x", absl::Milliseconds(200)));
  auto big_only = open_cache(dir.path(), {.min_entry_bytes = 100});
  EXPECT_FALSE(*big_only->put(key_for("tiny"), "x", absl::Seconds(1)));
  CacheOptions second;
  second.writers = CacheWriters::kProcess0;
  second.process_index = 1;
  EXPECT_FALSE(*open_cache(dir.path(), second)->put(key_for("p1"), "x", absl::Seconds(1)));
  second.process_index = 0;
  EXPECT_TRUE(*open_cache(dir.path(), second)->put(key_for("p0"), "x", absl::Seconds(1)));
  EXPECT_FALSE(*open_cache(dir.path(), {.writers = CacheWriters::kNone})->put(key_for("n"), "x", absl::Seconds(1)));
  // Read-only: hits, but never writes, touches or removes.
  auto ro = open_cache(dir.path(), {.read_only = true});
  const std::string path = ro->path_of(key_for("slow").hex());
  const absl::Time old = absl::Now() - absl::Hours(5);
  set_mtime(path, old);
  EXPECT_EQ(*ro->get(key_for("slow")), "x");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(absl::TimeFromTimespec(st.st_mtim), old);
  EXPECT_FALSE(*ro->put(key_for("new"), "x", absl::Seconds(1)));
  write_all(path, "corrupt");
  EXPECT_TRUE(absl::IsNotFound(ro->get(key_for("slow")).status()));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(ro->stats().skipped_writes, 1);
}

TEST(CompilationCache, EvictsTheLeastRecentlyUsedFirst) {
  TempDir dir;
  const std::string payload(3000, 'p');  // compresses to a few dozen bytes
  auto cache = open_cache(dir.path(), {.max_bytes = 1 << 20});
  for (const char* name : {"a", "b", "c"}) ASSERT_TRUE(*cache->put(key_for(name), payload + name, absl::Seconds(1)));
  const int64_t entry_bytes = static_cast<int64_t>(fs::file_size(cache->path_of(key_for("a").hex())));
  const absl::Time t0 = absl::Now() - absl::Hours(1);
  set_mtime(cache->path_of(key_for("a").hex()), t0);
  set_mtime(cache->path_of(key_for("b").hex()), t0 + absl::Minutes(1));
  set_mtime(cache->path_of(key_for("c").hex()), t0 + absl::Minutes(2));
  EXPECT_TRUE(cache->get(key_for("a")).ok());  // a is now the most recently used
  // Room for three entries: writing d evicts b, the least recently used.
  auto small = open_cache(dir.path(), {.max_bytes = 3 * entry_bytes + entry_bytes / 2});
  ASSERT_TRUE(*small->put(key_for("d"), payload + "d", absl::Seconds(1)));
  EXPECT_FALSE(fs::exists(cache->path_of(key_for("b").hex())));
  for (const char* name : {"a", "c", "d"}) EXPECT_TRUE(small->get(key_for(name)).ok()) << name;
  EXPECT_EQ(small->stats().evictions, 1);
  EXPECT_EQ(*small->prune(0), 3);
  EXPECT_TRUE(small->list()->empty());
}

TEST(CompilationCache, AnOrphanedTempFileNeverBlocksAWriteAndIsPrunedWhenStale) {
  TempDir dir;
  auto cache = open_cache(dir.path());
  const CacheKey key = key_for("p");
  // What writers killed mid-write leave, under the names this process picks next (pids are reused).
  std::vector<std::string> orphans;
  for (int i = 0; i < 64; ++i) {
    orphans.push_back(dir.path() + "/.tmp-" + key.hex() + ".mcxc-" + std::to_string(::getpid()) + "-" + std::to_string(i));
    write_all(orphans.back(), "half an entry");
  }
  const std::string& orphan = orphans.front();
  EXPECT_TRUE(*cache->put(key, "x", absl::Seconds(1)));
  EXPECT_EQ(*cache->get(key), "x");
  EXPECT_EQ(*cache->prune(1 << 30), 0);  // young: a write in progress elsewhere may own it
  for (const std::string& o : orphans) set_mtime(o, absl::Now() - absl::Hours(2));
  EXPECT_EQ(*cache->prune(1 << 30), 64);
  EXPECT_FALSE(fs::exists(orphan));
}

TEST(CompilationCache, RefusesADirectoryOtherUsersMayWriteUnlessAllowed) {
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  CacheOptions o;
  o.directory = dir.path();
  absl::StatusOr<std::unique_ptr<CompilationCache>> refused = CompilationCache::open(o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("writable by other users (mode 0777)"), HasSubstr("MCX_COMPILATION_CACHE_ALLOW_SHARED_WRITERS=1")));
  o.allow_shared_writers = true;
  EXPECT_TRUE(CompilationCache::open(o).ok());
  o.directory = "";
  EXPECT_THAT(std::string(CompilationCache::open(o).status().message()), HasSubstr("the cache is off"));
}

// Four processes write the same keys at once; one is killed with SIGKILL mid-way. Every entry left verifies
// and reads back whole.
TEST(CompilationCache, ConcurrentWriterProcessesAndAKillLeaveOnlyWholeEntries) {
  TempDir dir;
  auto payload_of = [](int k) { return std::string(200000 + k * 1000, static_cast<char>('a' + k)); };
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = CompilationCache::open({.directory = dir.path()});
      if (!c.ok()) ::_exit(3);
      for (int round = 0; round < (p == 3 ? 1000000 : 20); ++round) {
        for (int k = 0; k < 8; ++k) {
          if (!(*c)->put(key_for("k" + std::to_string(k)), payload_of(k), absl::Seconds(1)).ok()) ::_exit(4);
          absl::StatusOr<std::string> got = (*c)->get(key_for("k" + std::to_string(k)));
          if (got.ok() && *got != payload_of(k)) ::_exit(5);  // a torn or mixed entry
        }
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::usleep(300 * 1000);
  ::kill(children[3], SIGKILL);  // the endless writer, mid-write
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[i], &status, 0), children[i]);
    if (i == 3) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << i << " status " << status;
    }
  }
  auto cache = open_cache(dir.path());
  const std::vector<EntryInfo> entries = *cache->verify();
  EXPECT_EQ(entries.size(), 8u);
  for (const EntryInfo& e : entries) EXPECT_TRUE(e.status.ok()) << e.key_hex << ": " << e.status;
  for (int k = 0; k < 8; ++k) EXPECT_EQ(*cache->get(key_for("k" + std::to_string(k))), payload_of(k)) << k;
}

std::string run_tool(const std::string& args, int* exit_code) {
  const std::string cmd = std::string(MCX_TEST_MCX_CACHE) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int status = ::pclose(f);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(McxCacheTool, ListsVerifiesInspectsPrunesAndClears) {
  TempDir dir;
  auto cache = open_cache(dir.path());
  for (const char* name : {"a", "b"}) ASSERT_TRUE(*cache->put(key_for(name), std::string(5000, *name), absl::Milliseconds(30)));
  int rc = -1;
  EXPECT_THAT(run_tool("ls " + dir.path(), &rc),
              AllOf(HasSubstr(key_for("a").hex().substr(0, 16)), HasSubstr("ok"), HasSubstr("executable")));
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(run_tool("stats --json " + dir.path(), &rc), HasSubstr("\"entries\": 2"));
  EXPECT_THAT(run_tool("verify " + dir.path(), &rc), HasSubstr("2 entries, 0 bad"));
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(run_tool("inspect " + dir.path() + " " + key_for("b").hex().substr(0, 10), &rc),
              AllOf(HasSubstr("mcx_version: "), HasSubstr("compile_time_ms: 30"), HasSubstr("payload_bytes: 5000")));
  EXPECT_EQ(rc, 0);
  // A flipped byte in the payload: the header still reads, verify finds it.
  const std::string path = cache->path_of(key_for("a").hex());
  std::string bytes = read_all(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  write_all(path, bytes);
  EXPECT_THAT(run_tool("verify " + dir.path(), &rc), AllOf(HasSubstr("1 bad"), HasSubstr("payload checksum mismatch")));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(run_tool("inspect " + dir.path() + " ffff", &rc), HasSubstr("no entry with key"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(run_tool("prune " + dir.path() + " --max-bytes 0 --json", &rc), HasSubstr("{\"removed\":2}"));
  EXPECT_EQ(rc, 0);
  ASSERT_TRUE(*cache->put(key_for("c"), "c", absl::Milliseconds(1)));
  EXPECT_THAT(run_tool("clear " + dir.path(), &rc), HasSubstr("removed 1 files"));
  EXPECT_THAT(run_tool("ls", &rc), HasSubstr("DIR"));
  EXPECT_EQ(rc, 2);
}

}  // namespace
}  // namespace mcx::cache
