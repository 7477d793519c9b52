// Generated kernels through the persistent compilation cache (mcx/cache/compiled_entry_cache.h): a second process
// links the first one's object code instead of running LLVM and computes the same bits; a damaged entry is a
// miss that is compiled again and healed; a different generator target misses and says why.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/cache/install.h"
#include "mcx/cache/compiled_entry_cache.h"
#include "mcx/core/buffer.h"
#include "mcx/core/hash.h"
#include "tests/support/cache_entries.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace mcx::cache {
namespace {

using ::testing::HasSubstr;
using cpu::FusedGroup;
using cpu::FusedNode;
using ir::OpKind;

using test::TempDir;

// Three groups with different signatures: transcendental, integer and comparison chains.
std::vector<FusedGroup> groups() {
  std::vector<FusedGroup> gs(3);
  gs[0].leaf_dtypes = {DType::kFloat32, DType::kFloat32};
  gs[0].nodes = {{OpKind::kExp, DType::kFloat32, DType::kFloat32, {0}},
                 {OpKind::kMul, DType::kFloat32, DType::kFloat32, {2, 1}},
                 {OpKind::kTanh, DType::kFloat32, DType::kFloat32, {3}}};
  gs[0].outputs = {2};
  gs[1].leaf_dtypes = {DType::kInt32, DType::kInt32};
  gs[1].nodes = {{OpKind::kDiv, DType::kInt32, DType::kInt32, {0, 1}},
                 {OpKind::kRem, DType::kInt32, DType::kInt32, {2, 1}}};
  gs[1].outputs = {0, 1};
  gs[2].leaf_dtypes = {DType::kFloat64, DType::kFloat64};
  gs[2].nodes = {{OpKind::kLog1p, DType::kFloat64, DType::kFloat64, {0}},
                 {OpKind::kLt, DType::kBool, DType::kFloat64, {2, 1}}};
  gs[2].outputs = {0, 1};
  return gs;
}

// Runs this binary as KernelCacheChild.CompileAndRun with the cache in dir; returns its output.
std::string run_child(const std::string& dir) {
  return test::run_self("MCX_TEST_KERNEL_CACHE_CHILD=1 MCX_COMPILATION_CACHE_DIR=" + dir, "KernelCacheChild.CompileAndRun");
}

TEST(KernelCacheChild, CompileAndRun) {
  if (!std::getenv("MCX_TEST_KERNEL_CACHE_CHILD")) GTEST_SKIP() << "only run as a child of KernelCache tests";
  auto cache = install_compilation_cache();
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_NE(*cache, nullptr);
  Sha256 digest;
  for (FusedGroup g : groups()) {
    const int64_t n = 5000;
    g.dims = {n};
    auto k = cpu::codegen::compile_fused(g);
    ASSERT_TRUE(k.ok()) << k.status();
    g.kernel = *k;
    std::vector<Buffer> leaves;
    std::vector<cpu::View> views;
    for (size_t i = 0; i < g.leaf_dtypes.size(); ++i) {
      Buffer b = Buffer::uninitialized(g.leaf_dtypes[i], {n});
      for (int64_t e = 0; e < n; ++e) {
        const double v = std::sin(0.37 * e + i) * 9.0 + (i == 1 ? 0.0 : 1.5);
        if (g.leaf_dtypes[i] == DType::kInt32) b.mutable_data<int32_t>()[e] = static_cast<int32_t>(v);
        else if (g.leaf_dtypes[i] == DType::kFloat32) b.mutable_data<float>()[e] = static_cast<float>(v);
        else b.mutable_data<double>()[e] = v;
      }
      views.push_back(cpu::view_of(b));
      leaves.push_back(std::move(b));
    }
    std::vector<Buffer> outs;
    std::vector<std::byte*> ptrs;
    for (int o : g.outputs) {
      outs.push_back(Buffer::zeros(g.nodes[o].dtype, {n}));
      ptrs.push_back(static_cast<std::byte*>(outs.back().mutable_data()));
    }
    cpu::run_fused(g, views, ptrs);
    for (const Buffer& b : outs) digest.update(std::string_view(static_cast<const char*>(b.data()), b.nbytes()));
  }
  const cpu::codegen::CodegenStats st = cpu::codegen::stats();
  const CacheStats cs = (*cache)->stats();
  const Sha256Digest d = digest.digest();
  std::string hex;
  for (uint8_t byte : d) hex += fmt::format("{:02x}", byte);
  std::printf("report compiled=%lld loaded=%lld corrupt=%lld digest=%s compile_ms=%.1f load_ms=%.1f\n",
              static_cast<long long>(st.kernels_compiled), static_cast<long long>(st.kernels_loaded),
              static_cast<long long>(cs.corrupt_entries), hex.c_str(), st.compile_ms_total, st.load_ms_total);
}

TEST(KernelCache, ASecondProcessLinksTheStoredKernelsAndADamagedEntryIsCompiledAgain) {
  if (!cpu::codegen::built_with_llvm()) GTEST_SKIP() << "built without LLVM";
  TempDir dir;
  const std::string cold = run_child(dir.path());
  ASSERT_THAT(cold, HasSubstr("report ")) << cold;
  EXPECT_EQ(test::report_field(cold, "compiled"), "3") << cold;
  EXPECT_EQ(test::report_field(cold, "loaded"), "0") << cold;

  const std::string warm = run_child(dir.path());
  ASSERT_THAT(warm, HasSubstr("report ")) << warm;
  EXPECT_EQ(test::report_field(warm, "compiled"), "0") << warm;
  EXPECT_EQ(test::report_field(warm, "loaded"), "3") << warm;
  EXPECT_EQ(test::report_field(warm, "digest"), test::report_field(cold, "digest"));
  std::printf("cold: compile %s ms; warm: load %s ms\n", test::report_field(cold, "compile_ms").c_str(),
              test::report_field(warm, "load_ms").c_str());

  // Flip one byte in the middle of every entry: each is a miss (counted, removed), compiled and written
  // again, with the same results; the run after that loads them all.
  const int damaged = test::damage_every_entry(dir.path());
  EXPECT_EQ(damaged, 3);
  const std::string healed = run_child(dir.path());
  EXPECT_EQ(test::report_field(healed, "compiled"), "3") << healed;
  EXPECT_EQ(test::report_field(healed, "corrupt"), "3") << healed;
  EXPECT_EQ(test::report_field(healed, "digest"), test::report_field(cold, "digest"));
  const std::string again = run_child(dir.path());
  EXPECT_EQ(test::report_field(again, "loaded"), "3") << again;
}

TEST(KernelCache, EntryKeysNameEveryComponentAndAnotherTargetMisses) {
  TempDir dir;
  std::shared_ptr<CompilationCache> cache = test::explaining_cache(dir.path());
  ASSERT_NE(cache, nullptr);
  CompiledEntryCache store{cache};
  const CompiledKey key{kCompiledKernel, "cpu", "leaves f32; exp f32(f32) %0; outputs 0", "",
                        {{"llvm_version", "llvm 19.1.7"},
                         {"generator", "generator 0123456789abcdef"},
                         {"cpu", "cpu skylake"},
                         {"cpu_features", "+avx2,+fma"}}};
  auto k = CompiledEntryCache::entry_key(key);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<std::string> names;
  for (const CacheKeyComponent& c : k->components()) names.push_back(c.name);
  EXPECT_THAT(names, ::testing::ElementsAre("kind", "platform", "program", "llvm_version", "generator", "cpu",
                                            "cpu_features", "mcx_version"));
  ASSERT_TRUE(store.save(key, "object bytes", 12.5).ok());
  ASSERT_EQ(mcx::value_or_throw(store.load(key)), std::optional<std::string>("object bytes"));
  CompiledKey other = key;
  other.build[3].value = "+avx2,-fma";
  EXPECT_EQ(mcx::value_or_throw(store.load(other)), std::nullopt);
  auto other_key = CompiledEntryCache::entry_key(other);
  ASSERT_TRUE(other_key.ok());
  EXPECT_THAT(store.cache().explain_miss(*other_key), HasSubstr("cpu_features"));
  other = key;
  other.build[0].value = "llvm 20.1.0";
  EXPECT_EQ(mcx::value_or_throw(store.load(other)), std::nullopt);
}

// The code generator's target splits into the named components kernel and executable keys carry.
TEST(KernelCache, TheGeneratorsTargetIsNamedComponents) {
  const std::vector<KeyComponent> target = cpu::codegen::target_components();
  ASSERT_FALSE(target.empty());
  if (!cpu::codegen::built_with_llvm()) {
    EXPECT_EQ(target, (std::vector<KeyComponent>{{"llvm_version", "none"}}));
    return;
  }
  ASSERT_GE(target.size(), 4u);
  EXPECT_EQ(target[0].name, "llvm_version");
  EXPECT_THAT(target[0].value, ::testing::StartsWith("llvm "));
  EXPECT_EQ(target[1].name, "generator");
  EXPECT_EQ(target[2].name, "cpu");
  EXPECT_EQ(target[3].name, "cpu_features");
  std::string joined;
  for (const KeyComponent& c : target) joined += (joined.empty() ? "" : "; ") + c.value;
  EXPECT_EQ(joined, cpu::codegen::target_description());
}

}  // namespace
}  // namespace mcx::cache
