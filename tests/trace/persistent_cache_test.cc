// jit through the persistent compilation cache (docs/compilation_cache.md), in fresh processes: a warm process
// reads the single-device executable and the 4-device partitioned one back, so the partitioner, the planner
// and the code generator do not run, and computes the same bits as the cold process.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/cache/install.h"
#include "mcx/core/hash.h"
#include "mcx/mcx.h"
#include "mcx/platform/stored_compile.h"
#include "mcx/runtime/spmd_executable.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::random_array;

std::string run_child(const std::string& dir) {
  // Every executable is written, however fast it compiles (the default threshold skips those under 1 ms).
  return test::run_self("MCX_COMPILATION_CACHE_MIN_COMPILE_TIME_MS=0 MCX_TEST_PERSISTENT_CACHE_CHILD=1 "
                        "MCX_COMPILATION_CACHE_DIR=" + dir,
                        "PersistentCacheChild.JitAndRun");
}

TEST(PersistentCacheChild, JitAndRun) {
  if (!std::getenv("MCX_TEST_PERSISTENT_CACHE_CHILD")) GTEST_SKIP() << "only run as a child of PersistentCache tests";
  ASSERT_NE(value_or_throw(cache::install_compilation_cache()), nullptr);
  // A 6-layer tanh MLP's value_and_grad: on one device, and on a 4-device mesh with the batch sharded.
  auto loss = [](const Tree& p, const Array& x) {
    Array h = x;
    for (int i = 0; i < 6; ++i) h = tanh(matmul(h, p.at("w" + std::to_string(i))) + p.at("b" + std::to_string(i)));
    return mean(h * h);
  };
  Tree params;
  for (int i = 0; i < 6; ++i) {
    params["w" + std::to_string(i)] = random_array({32, 32}, 10 + i) * 0.3f;
    params["b" + std::to_string(i)] = random_array({32}, 20 + i) * 0.1f;
  }
  const Array x = random_array({16, 32}, 3);
  const Mesh mesh = make_mesh({4}, {"data"});
  auto one = jit(value_and_grad(loss), {.name = "one_device"});
  auto four = jit(value_and_grad(loss),
                  {.name = "four_devices",
                   .in_shardings = {NamedSharding(mesh, P()), NamedSharding(mesh, P("data", None))}});
  Sha256 digest;
  for (auto* step : {&one, &four}) {
    auto [value, grads] = (*step)(params, x);
    for (const Array& a : tree_leaves(std::make_tuple(value, grads))) {
      const Buffer b = a.to_host();
      digest.update(std::string_view(static_cast<const char*>(b.data()), b.nbytes()));
    }
  }
  const SpmdCompileStats spmd = spmd_compile_stats();
  std::printf("report partitioned=%lld spmd_loaded=%lld executables_loaded=%lld kernels_compiled=%lld digest=%s\n",
              static_cast<long long>(spmd.partitioned), static_cast<long long>(spmd.loaded),
              static_cast<long long>(executable_store_stats().loaded),
              static_cast<long long>(cpu::codegen::stats().kernels_compiled), to_hex(digest.digest()).c_str());
}

TEST(PersistentCache, AWarmProcessSkipsThePartitionerPlannerAndCodeGeneratorWithTheSameResults) {
  test::TempDir dir;
  const std::string cold = run_child(dir.path());
  ASSERT_THAT(cold, HasSubstr("report ")) << cold;
  EXPECT_EQ(test::report_field(cold, "partitioned"), "1") << cold;
  EXPECT_EQ(test::report_field(cold, "spmd_loaded"), "0") << cold;
  const std::string warm = run_child(dir.path());
  ASSERT_THAT(warm, HasSubstr("report ")) << warm;
  EXPECT_EQ(test::report_field(warm, "partitioned"), "0") << warm;
  EXPECT_EQ(test::report_field(warm, "spmd_loaded"), "1") << warm;
  EXPECT_NE(test::report_field(warm, "executables_loaded"), "0") << warm;  // the single-device step
  EXPECT_EQ(test::report_field(warm, "kernels_compiled"), "0") << warm;
  EXPECT_EQ(test::report_field(warm, "digest"), test::report_field(cold, "digest"));
}

}  // namespace
}  // namespace mcx
