// Generated kernels (mcx/backend/cpu/codegen) against the interpreter they replace: every element-wise op
// on every dtype the generator takes, over inputs full of special values (NaN, infinities, signed zeros,
// denormals, integer extremes, division by zero), bit for bit; plus the planner's use of them, in-place
// outputs, partial tiles, fallbacks and the kernel cache. The fusion tests (fusion_test.cc,
// row_fusion_test.cc) run with generation on as well and compare fused programs with op-by-op execution.
#include <cmath>
#include <limits>
#include <random>

#include "gmock/gmock.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/elementwise.h"
#include "mcx/backend/cpu/fusion.h"
#include "tests/backend/backend_test_util.h"
#include "tests/support/backend/element_cases.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using Ints = std::vector<int64_t>;
using test::all_element_cases;
using test::element_case_name;
using test::ElementCase;
using test::interesting_values;

#define SKIP_WITHOUT_LLVM()                                                          \
  if (!codegen::built_with_llvm()) GTEST_SKIP() << "built without LLVM (MCX_WITH_LLVM=OFF)"

// Runs g over leaves with and without its generated kernel; returns {generated, interpreted}.
std::pair<std::vector<Buffer>, std::vector<Buffer>> run_both(FusedGroup g, const std::vector<Buffer>& leaves) {
  std::vector<View> views;
  for (const Buffer& b : leaves) views.push_back(view_of(b));
  std::pair<std::vector<Buffer>, std::vector<Buffer>> out;
  for (int pass = 0; pass < 2; ++pass) {
    FusedGroup run = g;
    if (pass == 1) run.kernel = nullptr;
    std::vector<Buffer>& bufs = pass == 0 ? out.first : out.second;
    std::vector<std::byte*> ptrs;
    for (int o : g.outputs) {
      bufs.push_back(Buffer::zeros(g.nodes[o].dtype, g.dims));
      ptrs.push_back(static_cast<std::byte*>(bufs.back().mutable_data()));
    }
    run_fused(run, views, ptrs);
  }
  return out;
}

TEST(Codegen, OnByDefaultWhenBuiltWithLlvm) {
  SKIP_WITHOUT_LLVM();
  if (const char* v = std::getenv("MCX_CODEGEN"); v != nullptr && std::string(v) == "0") {
    GTEST_SKIP() << "MCX_CODEGEN=0 in the environment";
  }
  EXPECT_TRUE(codegen::enabled());
  EXPECT_THAT(codegen::target_description(), ::testing::HasSubstr("llvm 19"));
}

TEST(Codegen, EveryOpAndDtypeMatchesTheInterpreterBitForBit) {
  SKIP_WITHOUT_LLVM();
  const std::vector<ElementCase> cases = all_element_cases();
  // The generator must take the bulk of the element-wise table, or this test would prove little.
  ASSERT_GE(cases.size(), 350u);
  const bool avx512 = codegen::target_description().find("+avx512f") != std::string::npos;
  int compared = 0;
  for (const ElementCase& c : cases) {
    SCOPED_TRACE(element_case_name(c));
    // 3 whole tiles and a partial one (padded to a block), so both kernel paths run.
    const int64_t n = 3 * kTileElements + 37;
    FusedGroup g;
    g.dims = {n};
    g.leaf_dtypes = c.leaves;
    FusedNode node{c.kind, c.result, c.operand, {}};
    for (size_t a = 0; a < c.leaves.size(); ++a) node.args.push_back(static_cast<int>(a));
    g.nodes = {node};
    g.outputs = {0};
    auto kernel = codegen::compile_fused(g);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    if (!kernel.ok()) continue;
    g.kernel = *kernel;
    std::vector<Buffer> leaves;
    for (size_t a = 0; a < c.leaves.size(); ++a) leaves.push_back(interesting_values(c.leaves[a], n, 17 + a));
    auto [generated, interpreted] = run_both(g, leaves);
    const bool transcendental = c.kind == OpKind::kExp || c.kind == OpKind::kLog || c.kind == OpKind::kLog1p ||
                                c.kind == OpKind::kExpm1 || c.kind == OpKind::kTanh || c.kind == OpKind::kSin ||
                                c.kind == OpKind::kCos || c.kind == OpKind::kPow || c.kind == OpKind::kLogistic;
    if (avx512 && transcendental) {
      // Documented in fused_kernel.h: libmvec variants of different widths may differ in the last bits.
      EXPECT_TRUE(test::buffers_near(generated[0], interpreted[0], 4e-7, 0)) << element_case_name(c);
    } else {
      EXPECT_TRUE(generated[0].bitwise_equal(interpreted[0]))
          << "generated " << generated[0].to_string(16) << "\ninterpreted " << interpreted[0].to_string(16);
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(cases.size()));
  const codegen::CodegenStats st = codegen::stats();
  std::printf("[codegen] %d op/dtype cases; %lld kernels compiled, %.1f ms each on average\n", compared,
              static_cast<long long>(st.kernels_compiled), st.compile_ms_total / std::max<int64_t>(1, st.kernels_compiled));
}

// A chain with several outputs, an output written over one of its leaves (in place), a uniform (broadcast
// scalar) leaf and a strided leaf, over sizes that end in partial tiles and partial blocks.
TEST(Codegen, ChainsWithInPlaceOutputsAndBroadcastLeaves) {
  SKIP_WITHOUT_LLVM();
  // 16-bit floats are read as stored by the kernel (widened inside it) and rounded after every node.
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
  for (int64_t n : {1, 63, 64, 65, 1000, 1024, 4 * 1024 + 5}) {
    SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " n=", n));
    FusedGroup g;
    g.dims = {n};
    g.leaf_dtypes = {t, t, t};
    // slots: 0 a, 1 b (broadcast scalar), 2 c (strided); 3 exp(a), 4 3*b, 5 4+c, 6 max(5, 0), 7 5 > a
    g.nodes = {{OpKind::kExp, t, t, {0}},
               {OpKind::kMul, t, t, {3, 1}},
               {OpKind::kAdd, t, t, {4, 2}},
               {OpKind::kMax, t, t, {5, 2}},
               {OpKind::kGt, DType::kBool, t, {5, 0}}};
    g.outputs = {3, 4, 1};
    auto kernel = codegen::compile_fused(g);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    Buffer a = test::random_buffer(t, {n}, 1, -3, 3);
    Buffer s = test::random_buffer(t, {}, 2);
    Buffer c2 = test::random_buffer(t, {2 * n}, 3);
    std::vector<View> views = {view_of(a), view_of(s), view_of(c2)};
    views[1].dims = {n};
    views[1].strides = {0};
    views[2].dims = {n};
    views[2].strides = {2};
    std::vector<Buffer> results[2];
    for (int pass = 0; pass < 2; ++pass) {
      FusedGroup run = g;
      run.kernel = pass == 0 ? *kernel : nullptr;
      // Output 0 reuses a copy of leaf 0's storage (in-place, as the planner does for a dying leaf).
      Buffer a_copy = Buffer::uninitialized(t, {n});
      std::memcpy(a_copy.mutable_data(), a.data(), a.nbytes());
      std::vector<View> v = views;
      v[0] = view_of(a_copy);
      Buffer o1 = Buffer::zeros(DType::kBool, {n}), o2 = Buffer::zeros(t, {n});
      run_fused(run, v, {static_cast<std::byte*>(a_copy.mutable_data()), static_cast<std::byte*>(o1.mutable_data()),
                         static_cast<std::byte*>(o2.mutable_data())});
      results[pass] = {a_copy, o1, o2};
    }
    for (int j = 0; j < 3; ++j) {
      EXPECT_TRUE(results[0][j].bitwise_equal(results[1][j]))
          << "output " << j << ": generated " << results[0][j].to_string(8) << " interpreted "
          << results[1][j].to_string(8);
    }
  }
}

TEST(Codegen, TheCompilerGeneratesKernelsForFusedChainsAndSharesThemBySignature) {
  SKIP_WITHOUT_LLVM();
  ir::ProgramBuilder b("chain");
  auto x = b.add_parameter({DType::kFloat64, concrete_shape({77, 31})});
  auto y = b.add_parameter({DType::kFloat64, concrete_shape({77, 31})});
  auto z = b.unary(OpKind::kTanh, b.binary(OpKind::kSub, b.binary(OpKind::kMul, x, y), x));
  ir::Program p = std::move(b).build({z});
  const codegen::CodegenStats before = codegen::stats();
  std::vector<Buffer> args = {test::random_buffer(DType::kFloat64, {77, 31}, 4),
                              test::random_buffer(DType::kFloat64, {77, 31}, 5)};
  std::vector<Buffer> first = run_cpu(p, args);
  const codegen::CodegenStats after_first = codegen::stats();
  std::vector<Buffer> second = run_cpu(p, args);  // a second compile of the same program
  const codegen::CodegenStats after_second = codegen::stats();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(first[0].bitwise_equal(second[0]));
  EXPECT_LE(after_first.kernels_compiled, before.kernels_compiled + 1);
  EXPECT_EQ(after_second.kernels_compiled, after_first.kernels_compiled);
  EXPECT_EQ(after_second.kernel_reuses, after_first.kernel_reuses + 1);
  std::vector<Buffer> unfused = run_unfused(p, args);
  EXPECT_TRUE(first[0].bitwise_equal(unfused[0]));
}

TEST(Codegen, UnsupportedGroupsAndDisabledGenerationRunTheInterpreter) {
  SKIP_WITHOUT_LLVM();
  FusedGroup ipow;
  ipow.leaf_dtypes = {DType::kInt32, DType::kInt32};
  ipow.nodes = {{OpKind::kPow, DType::kInt32, DType::kInt32, {0, 1}}};
  ipow.outputs = {0};
  EXPECT_THAT(codegen::unsupported_reason(ipow), ::testing::HasSubstr("integer pow"));
  auto k = codegen::compile_fused(ipow);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);

  // With generation off, compiling a chain makes no kernel and gives the same values.
  ir::ProgramBuilder b("off");
  auto x = b.add_parameter({DType::kFloat32, concrete_shape({100})});
  auto z = b.unary(OpKind::kLog1p, b.binary(OpKind::kMul, x, x));
  ir::Program p = std::move(b).build({z});
  std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, {100}, 6)};
  std::vector<Buffer> on = run_cpu(p, args);
  codegen::set_enabled(false);
  const int64_t compiled = codegen::stats().kernels_compiled;
  const int64_t reused = codegen::stats().kernel_reuses;
  std::vector<Buffer> off = run_cpu(p, args);
  codegen::set_enabled(true);
  EXPECT_EQ(codegen::stats().kernels_compiled, compiled);
  EXPECT_EQ(codegen::stats().kernel_reuses, reused);
  ASSERT_EQ(on.size(), 1u);
  EXPECT_TRUE(on[0].bitwise_equal(off[0]));
}

}  // namespace
}  // namespace mcx::cpu::testing
