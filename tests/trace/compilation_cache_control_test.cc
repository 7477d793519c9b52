// The persistent compilation cache from code (mcx/runtime/compilation_cache_control.h), against JAX's
// documented behaviour of jax.experimental.compilation_cache and its options (docs/compilation_cache.md,
// "From code"): set_cache_dir / enable / disable / reset_cache at run time, strict mode
// (jax_raise_persistent_cache_errors), the contents check (a poisoned entry is caught, a clean one passes in a
// fresh process for executables, partitioned programs and kernels alike) and the custom key hook.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/cache/install.h"
#include "mcx/core/hash.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/mcx.h"
#include "mcx/platform/platform_registry.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/spmd_executable.h"
#include "tests/support/cache_entries.h"
#include "tests/support/compiled_programs.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

int entries_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".mcxc";
  return n;
}

// Leaves the process's cache settings as the environment gives them, whatever a test did.
struct ResetCacheAtExit {
  ~ResetCacheAtExit() { compilation_cache::reset_cache(); }
};

const Platform& cpu_platform() {
  EXPECT_TRUE(cpu::register_cpu_platform().ok());
  return *value_or_throw(find_platform("cpu"));
}

std::string encoding_of(const Executable& exe) { return ir::canonical_encoding(exe.program()); }

TEST(CompilationCacheFromCode, DirectoryEnableDisableAndResetTakeEffectAtRunTime) {
  ResetCacheAtExit reset;
  test::TempDir dir;
  compilation_cache::set_min_compile_time_secs(0);  // every executable is written, however fast
  compilation_cache::set_cache_dir(dir.path());
  EXPECT_EQ(compilation_cache::cache_dir(), dir.path());
  EXPECT_TRUE(compilation_cache::is_enabled());
  const Array x = testing_util::random_array({8, 8}, 1);
  auto f = jit([](const Array& a) { return tanh(matmul(a, a)) + 1.0f; }, {.name = "f"});
  (void)f(x).to_host();
  const int after_f = entries_in(dir.path());
  EXPECT_GT(after_f, 0);

  compilation_cache::disable();  // the directory is kept, compiles do not use it
  EXPECT_FALSE(compilation_cache::is_enabled());
  EXPECT_EQ(compilation_cache::cache_dir(), "");
  auto g = jit([](const Array& a) { return exp(a) * 3.0f - a; }, {.name = "g"});
  (void)g(x).to_host();
  EXPECT_EQ(entries_in(dir.path()), after_f);

  compilation_cache::enable();
  EXPECT_EQ(compilation_cache::cache_dir(), dir.path());
  auto h = jit([](const Array& a) { return sin(a) * cos(a) + a; }, {.name = "h"});
  (void)h(x).to_host();
  EXPECT_GT(entries_in(dir.path()), after_f);
  EXPECT_GT(compilation_cache::stats().writes, 0);

  // A directory that cannot be used is an error naming it, and the previous settings stay in force.
  const std::string file = dir.path() + "/not-a-directory";
  std::ofstream(file) << "x";
  try {
    compilation_cache::set_cache_dir(file);
    ADD_FAILURE() << "a file taken as the cache directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a directory"));
  }
  EXPECT_EQ(compilation_cache::cache_dir(), dir.path());
  // Values out of range name the range.
  EXPECT_THROW(compilation_cache::set_check_contents(1.5), InvalidArgument);
  EXPECT_THROW(compilation_cache::set_min_compile_time_secs(-1), InvalidArgument);
  EXPECT_THROW(compilation_cache::set_max_size_bytes(-5), InvalidArgument);

  compilation_cache::set_cache_dir("");  // off
  EXPECT_EQ(compilation_cache::cache_dir(), "");
  compilation_cache::set_cache_dir(dir.path());
  compilation_cache::reset_cache();  // back to the environment, which names no directory here
  EXPECT_EQ(compilation_cache::cache_dir(), "");
  EXPECT_TRUE(compilation_cache::is_enabled());
}

// A poisoned entry (another program's executable stored under this program's key: checksums pass, so only a
// recompile can tell) runs the wrong program unless the contents are checked; the check catches it, uses the
// fresh executable and heals the entry, and in strict mode the compile fails instead.
TEST(CompilationCacheFromCode, TheContentsCheckCatchesAPoisonedEntryAndStrictModeFailsTheCompile) {
  ResetCacheAtExit reset;
  test::TempDir dir;
  const Platform& platform = cpu_platform();
  const std::vector<ir::Program> programs = test::compiled_programs();
  const ir::Program& a = programs[0];
  const ir::Program& b = programs[1];
  const std::string enc_a = ir::canonical_encoding(a), enc_b = ir::canonical_encoding(b);
  const std::string program_a = encoding_of(*value_or_throw(platform.compile(a)));
  const std::string program_b = encoding_of(*value_or_throw(platform.compile(b)));
  ASSERT_NE(program_a, program_b);

  compilation_cache::set_min_compile_time_secs(0);
  compilation_cache::set_cache_dir(dir.path());
  const std::string bytes_b = value_or_throw(value_or_throw(load_or_compile(platform, b, enc_b))->serialize());
  auto poison = [&] {
    ASSERT_TRUE(compiled_store()->save(executable_key(platform, enc_a), bytes_b, 10.0).ok());
  };
  poison();
  EXPECT_EQ(encoding_of(*value_or_throw(load_or_compile(platform, a, enc_a))), program_b)
      << "without the check the stored executable is trusted";

  compilation_cache::set_check_contents(1.0);
  const ExecutableStoreStats before = executable_store_stats();
  EXPECT_EQ(encoding_of(*value_or_throw(load_or_compile(platform, a, enc_a))), program_a);
  EXPECT_EQ(executable_store_stats().checked - before.checked, 1);
  EXPECT_EQ(executable_store_stats().check_mismatches - before.check_mismatches, 1);
  compilation_cache::set_check_contents(0.0);
  EXPECT_EQ(encoding_of(*value_or_throw(load_or_compile(platform, a, enc_a))), program_a) << "the entry was healed";

  // A clean hit passes the check.
  compilation_cache::set_check_contents(1.0);
  const ExecutableStoreStats clean = executable_store_stats();
  EXPECT_EQ(encoding_of(*value_or_throw(load_or_compile(platform, a, enc_a))), program_a);
  EXPECT_EQ(executable_store_stats().checked - clean.checked, 1);
  EXPECT_EQ(executable_store_stats().check_mismatches - clean.check_mismatches, 0);

  compilation_cache::set_raise_persistent_cache_errors(true);
  poison();
  absl::StatusOr<std::shared_ptr<const Executable>> strict = load_or_compile(platform, a, enc_a);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(strict.status().message(), HasSubstr("differs from a fresh compile"));
  EXPECT_THAT(strict.status().message(), HasSubstr("MCX_RAISE_PERSISTENT_CACHE_ERRORS"));

  // Strict mode: a damaged entry is an error too, and the entry is kept for inspection.
  compilation_cache::set_check_contents(0.0);
  ASSERT_GT(test::damage_every_entry(dir.path()), 0);
  const int damaged = entries_in(dir.path());
  strict = load_or_compile(platform, a, enc_a);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(strict.status().message(), HasSubstr("the entry is kept"));
  EXPECT_EQ(entries_in(dir.path()), damaged);
  // Without strict mode it is a miss that is compiled and heals.
  compilation_cache::set_raise_persistent_cache_errors(false);
  EXPECT_EQ(encoding_of(*value_or_throw(load_or_compile(platform, a, enc_a))), program_a);
}

TEST(CompilationCacheFromCode, TheCustomHookIsAKeyComponent) {
  ResetCacheAtExit reset;
  test::TempDir dir;
  const Platform& platform = cpu_platform();
  const ir::Program p = test::compiled_programs()[0];
  const std::string enc = ir::canonical_encoding(p);
  compilation_cache::set_min_compile_time_secs(0);
  compilation_cache::set_cache_dir(dir.path());
  std::string site = "site-v1";
  compilation_cache::set_custom_hook([&] { return site; });
  auto compiled = [] { return executable_store_stats().compiled; };
  int64_t n = compiled();
  ASSERT_TRUE(load_or_compile(platform, p, enc).ok());
  EXPECT_EQ(compiled() - n, 1);
  n = compiled();
  ASSERT_TRUE(load_or_compile(platform, p, enc).ok());
  EXPECT_EQ(compiled() - n, 0) << "same hook string: a hit";
  site = "site-v2";
  ASSERT_TRUE(load_or_compile(platform, p, enc).ok());
  EXPECT_EQ(compiled() - n, 1) << "another hook string: a miss";
  bool found = false;
  for (const cache::EntryInfo& e : value_or_throw(cache::installed_compilation_cache()->list())) {
    if (!e.header) continue;
    for (const cache::CacheKeyComponent& c : e.header->components) found |= c.name == "custom" && c.digest == sha256("site-v2");
  }
  EXPECT_TRUE(found) << "the entry's header names the custom component";

  // A hook that throws never lets the exception out of the store: logged (compiled without the store), or in
  // strict mode the compile's error.
  compilation_cache::set_custom_hook([]() -> std::string { throw std::runtime_error("no site file"); });
  EXPECT_TRUE(load_or_compile(platform, p, enc).ok());
  compilation_cache::set_raise_persistent_cache_errors(true);
  absl::StatusOr<std::shared_ptr<const Executable>> strict = load_or_compile(platform, p, enc);
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("no site file"));
}

// In a fresh process (kernels and partitioned programs are compiled once per process), every kind of hit is
// compiled again and compared: a clean cache matches byte for byte, so the check finds no difference.
TEST(CompilationCacheFromCodeChild, JitWithChecks) {
  if (!std::getenv("MCX_TEST_CACHE_CHECK_CHILD")) GTEST_SKIP() << "only run as a child of CompilationCacheFromCode";
  auto loss = [](const Tree& p, const Array& x) { return mean(tanh(matmul(x, p.at("w")) + p.at("b"))); };
  Tree params{{"w", testing_util::random_array({16, 16}, 4)}, {"b", testing_util::random_array({16}, 5)}};
  const Array x = testing_util::random_array({8, 16}, 6);
  const Mesh mesh = make_mesh({4}, {"data"});
  auto one = jit(value_and_grad(loss), {.name = "one"});
  auto four = jit(value_and_grad(loss),
                  {.name = "four", .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data", None))}});
  float sum = 0;
  for (auto* step : {&one, &four}) sum += std::get<0>((*step)(params, x)).item<float>();
  const SpmdCompileStats spmd = spmd_compile_stats();
  const ExecutableStoreStats ex = executable_store_stats();
  const cpu::codegen::CodegenStats cg = cpu::codegen::stats();
  std::printf("report spmd_checked=%lld spmd_mismatches=%lld exe_checked=%lld exe_mismatches=%lld "
              "kernels_checked=%lld kernel_mismatches=%lld value=%.6f\n",
              static_cast<long long>(spmd.checked), static_cast<long long>(spmd.check_mismatches),
              static_cast<long long>(ex.checked), static_cast<long long>(ex.check_mismatches),
              static_cast<long long>(cg.kernels_checked), static_cast<long long>(cg.kernel_check_mismatches), sum);
}

TEST(CompilationCacheFromCode, ACleanCacheMatchesFreshCompilesOfExecutablesPartitionedProgramsAndKernels) {
  test::TempDir dir;
  const std::string env = "MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS=0 MCX_TEST_CACHE_CHECK_CHILD=1 "
                          "MCX_RAISE_PERSISTENT_CACHE_ERRORS=1 MCX_COMPILATION_CACHE_DIR=" + dir.path();
  const std::string cold = test::run_self(env, "CompilationCacheFromCodeChild.JitWithChecks");
  ASSERT_THAT(cold, HasSubstr("report ")) << cold;
  const std::string checked =
      test::run_self(env + " MCX_COMPILATION_CACHE_CHECK_CONTENTS=1", "CompilationCacheFromCodeChild.JitWithChecks");
  ASSERT_THAT(checked, HasSubstr("report ")) << checked;
  EXPECT_EQ(test::report_field(checked, "spmd_checked"), "1") << checked;
  EXPECT_NE(test::report_field(checked, "exe_checked"), "0") << checked;
  EXPECT_NE(test::report_field(checked, "kernels_checked"), "0") << checked;
  EXPECT_EQ(test::report_field(checked, "spmd_mismatches"), "0") << checked;
  EXPECT_EQ(test::report_field(checked, "exe_mismatches"), "0") << checked;
  EXPECT_EQ(test::report_field(checked, "kernel_mismatches"), "0") << checked;
  EXPECT_EQ(test::report_field(checked, "value"), test::report_field(cold, "value"));
}

TEST(CompilationCacheFromCodeChild, CreateDevices) {
  if (!std::getenv("MCX_TEST_CACHE_CHECK_CHILD")) GTEST_SKIP() << "only run as a child of CompilationCacheFromCode";
  try {
    std::printf("devices=%zu\n", devices().size());
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
  }
}

// A cache directory that cannot be used is logged and the process runs without it; strict mode makes it the
// error of device creation.
TEST(CompilationCacheFromCode, AnUnusableDirectoryAtStartIsAWarningOrInStrictModeAnError) {
  test::TempDir dir;
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  const std::string env = "MCX_TEST_CACHE_CHECK_CHILD=1 MCX_COMPILATION_CACHE_DIR=" + file;
  const std::string lenient = test::run_self(env, "CompilationCacheFromCodeChild.CreateDevices");
  EXPECT_THAT(lenient, HasSubstr("devices=")) << lenient;
  EXPECT_THAT(lenient, HasSubstr("running without the compilation cache")) << lenient;
  const std::string strict =
      test::run_self(env + " MCX_RAISE_PERSISTENT_CACHE_ERRORS=1", "CompilationCacheFromCodeChild.CreateDevices");
  EXPECT_THAT(strict, HasSubstr("error: ")) << strict;
  EXPECT_THAT(strict, HasSubstr("not a directory")) << strict;
}

}  // namespace
}  // namespace mcx
