// Serialised executables through the persistent compilation cache (mcx/cache/compiled_entry_cache.h): a
// second process reads every executable back (no planning, no code generation) and computes the same bits;
// a damaged entry is a miss that is compiled again and healed; another option, format or target misses and
// says which component differs.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/cache/compiled_entry_cache.h"
#include "mcx/cache/install.h"
#include "mcx/core/hash.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/platform/platform_registry.h"
#include "mcx/platform/stored_compile.h"
#include "tests/support/compiled_programs.h"
#include "tests/support/platform_run.h"
#include "tests/support/cache_entries.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace mcx::cache {
namespace {

using ::testing::HasSubstr;
using test::TempDir;

// Runs this binary as ExecutableCacheChild.CompileAndRun with the cache in dir; returns its output.
std::string run_child(const std::string& dir, const std::string& env = "") {
  // Every program is written, however fast it compiles (the default threshold skips those under 1 ms).
  return test::run_self(env + " MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS=0 MCX_TEST_EXECUTABLE_CACHE_CHILD=1 "
                        "MCX_COMPILATION_CACHE_DIR=" + dir,
                        "ExecutableCacheChild.CompileAndRun");
}

TEST(ExecutableCacheChild, CompileAndRun) {
  if (!std::getenv("MCX_TEST_EXECUTABLE_CACHE_CHILD")) GTEST_SKIP() << "only run as a child of ExecutableCache tests";
  auto cache = install_compilation_cache();
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_NE(*cache, nullptr);
  ASSERT_TRUE(cpu::register_cpu_platform().ok());
  const Platform& platform = *value_or_throw(find_platform("cpu"));
  Sha256 digest;
  for (const ir::Program& p : test::compiled_programs()) {
    auto exe = load_or_compile(platform, p, ir::canonical_encoding(p));
    ASSERT_TRUE(exe.ok()) << p.name << ": " << exe.status();
    for (const Buffer& b : test::run_on_platform(platform, **exe, test::random_args(p, 11))) {
      digest.update(std::string_view(static_cast<const char*>(b.data()), b.nbytes()));
    }
  }
  const ExecutableStoreStats ex = executable_store_stats();
  const cpu::codegen::CodegenStats cg = cpu::codegen::stats();
  const CacheStats cs = (*cache)->stats();
  std::printf("report compiled=%lld loaded=%lld offered=%lld kernels_compiled=%lld corrupt=%lld digest=%s\n",
              static_cast<long long>(ex.compiled), static_cast<long long>(ex.loaded), static_cast<long long>(ex.offered),
              static_cast<long long>(cg.kernels_compiled), static_cast<long long>(cs.corrupt_entries),
              to_hex(digest.digest()).c_str());
}

TEST(ExecutableCache, ASecondProcessReadsEveryExecutableBackAndADamagedEntryIsCompiledAgain) {
  TempDir dir;
  const std::string programs = std::to_string(test::compiled_programs().size());
  const std::string cold = run_child(dir.path());
  ASSERT_THAT(cold, HasSubstr("report ")) << cold;
  EXPECT_EQ(test::report_field(cold, "compiled"), programs) << cold;
  EXPECT_EQ(test::report_field(cold, "loaded"), "0") << cold;
  EXPECT_EQ(test::report_field(cold, "offered"), programs) << cold;

  const std::string warm = run_child(dir.path());
  ASSERT_THAT(warm, HasSubstr("report ")) << warm;
  EXPECT_EQ(test::report_field(warm, "compiled"), "0") << warm;
  EXPECT_EQ(test::report_field(warm, "loaded"), programs) << warm;
  EXPECT_EQ(test::report_field(warm, "kernels_compiled"), "0") << warm;
  EXPECT_EQ(test::report_field(warm, "digest"), test::report_field(cold, "digest"));

  // The interpreter's executables are other entries (codegen is a key component), with the same results
  // where the generated code is bitwise equal to the interpreter (docs/codegen.md): compare the counts only.
  const std::string interpreted = run_child(dir.path(), "MCX_CODEGEN=0");
  EXPECT_EQ(test::report_field(interpreted, "loaded"), "0") << interpreted;
  EXPECT_EQ(test::report_field(interpreted, "compiled"), programs) << interpreted;

  // Flip one byte in the middle of every entry (executables of both settings, and kernels): each is a miss
  // that is compiled and written again.
  const int damaged = test::damage_every_entry(dir.path());
  EXPECT_GE(damaged, 2 * static_cast<int>(test::compiled_programs().size()));
  const std::string healed = run_child(dir.path());
  EXPECT_EQ(test::report_field(healed, "loaded"), "0") << healed;
  EXPECT_EQ(test::report_field(healed, "compiled"), programs) << healed;
  EXPECT_NE(test::report_field(healed, "corrupt"), "0") << healed;
  EXPECT_EQ(test::report_field(healed, "digest"), test::report_field(cold, "digest"));
  const std::string again = run_child(dir.path());
  EXPECT_EQ(test::report_field(again, "loaded"), programs) << again;
  EXPECT_EQ(test::report_field(again, "digest"), test::report_field(cold, "digest"));
}

TEST(ExecutableCache, EntryKeysNameEveryComponentAndAnotherFormatOptionOrPlatformMisses) {
  TempDir dir;
  std::shared_ptr<CompilationCache> cache = test::explaining_cache(dir.path());
  ASSERT_NE(cache, nullptr);
  CompiledEntryCache store{cache};
  const CompiledKey key{kCompiledExecutable, "cpu", "canonical program bytes", "",
                        {{"options", "codegen=1"},
                         {"executable_format", "cpu executable format 1; planner 0011223344556677"},
                         {"llvm_version", "llvm 19.1.7"},
                         {"generator", "generator 0123456789abcdef"},
                         {"cpu", "cpu skylake"},
                         {"cpu_features", "+avx2,+fma"}}};
  auto k = CompiledEntryCache::entry_key(key);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<std::string> names;
  for (const CacheKeyComponent& c : k->components()) names.push_back(c.name);
  EXPECT_THAT(names, ::testing::ElementsAre("kind", "platform", "program", "options", "executable_format",
                                            "llvm_version", "generator", "cpu", "cpu_features", "mcx_version"));
  ASSERT_TRUE(store.save(key, "executable bytes", 12.5).ok());
  ASSERT_EQ(value_or_throw(store.load(key)), std::optional<std::string>("executable bytes"));
  CompiledKey other = key;
  other.build[1].value = "cpu executable format 1; planner 8899aabbccddeeff";  // a rebuilt planner
  EXPECT_EQ(value_or_throw(store.load(other)), std::nullopt);
  EXPECT_THAT(store.cache().explain_miss(*CompiledEntryCache::entry_key(other)), HasSubstr("executable_format"));
  other = key;
  other.build = {{"options", "codegen=0"}, key.build[1], {"target", "interpreter"}};
  EXPECT_EQ(value_or_throw(store.load(other)), std::nullopt);
  EXPECT_THAT(store.cache().explain_miss(*CompiledEntryCache::entry_key(other)), HasSubstr("options"));
  // The same program and build on another platform is another entry, and the miss names the platform.
  other = key;
  other.platform = "cuda";
  EXPECT_EQ(value_or_throw(store.load(other)), std::nullopt);
  EXPECT_THAT(store.cache().explain_miss(*CompiledEntryCache::entry_key(other)), HasSubstr("platform"));
  // A partitioned program is another kind, with its device assignment after the program.
  other = key;
  other.kind = kCompiledSpmdExecutable;
  other.device_assignment = "mesh {data: 2}; in P('data'); out auto";
  names.clear();
  const CacheKey spmd_key = value_or_throw(CompiledEntryCache::entry_key(other));
  for (const CacheKeyComponent& c : spmd_key.components()) names.push_back(c.name);
  EXPECT_EQ(names[3], "device_assignment");
  EXPECT_EQ(value_or_throw(store.load(other)), std::nullopt);
  // A malformed or repeated component name is refused, never stored under a key that drops it.
  other = key;
  other.build.push_back({"options", "codegen=0"});
  EXPECT_FALSE(CompiledEntryCache::entry_key(other).ok());
  other.build.back().name = "Bad Name";
  EXPECT_FALSE(CompiledEntryCache::entry_key(other).ok());
  ASSERT_TRUE(store.save(other, "never written", 12.5).ok());
  EXPECT_EQ(value_or_throw(store.load(other)), std::nullopt);
}

}  // namespace
}  // namespace mcx::cache
