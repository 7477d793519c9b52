// Row kernels (codegen/row_kernel.h): row regions generated whole. Every program here is compiled with code
// generation on (it must make a row kernel where one is expected) and compared bit for bit with the same
// program run step by step on the interpreter (generation off) and op by op, for thread counts 1..4, over
// inputs with NaN, infinities and signed zeros; and a serialised executable keeps its row kernel.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/row_kernel_runner.h"
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using ir::ValueId;
using Ints = std::vector<int64_t>;

#define SKIP_WITHOUT_LLVM() \
  if (!codegen::built_with_llvm()) GTEST_SKIP() << "built without LLVM (MCX_WITH_LLVM=OFF)"

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

// Restores code generation after a test switched it off.
struct CodegenGuard {
  ~CodegenGuard() { codegen::set_enabled(true); }
};

std::vector<Buffer> run_with_threads(const CpuExecutable& exe, const std::vector<Buffer>& args, int threads) {
  ThreadCountGuard guard;
  set_num_threads(threads);
  auto out = exe.execute(args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<Buffer>{};
}

void expect_same(const std::vector<Buffer>& got, const std::vector<Buffer>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].bitwise_equal(want[i]))
        << what << ", result " << i << ": " << got[i].to_string(8) << " vs " << want[i].to_string(8);
  }
}

// Compiles p with generation on (expecting `row_kernels` generated regions) and checks it against the
// interpreter's step-by-step regions and against op-by-op execution, bit for bit.
// layout_fits: whether the generated kernel runs (else a read's layout makes the region run its steps).
void expect_row_kernel_matches(const ir::Program& p, const std::vector<Buffer>& args, int row_kernels = 1,
                               bool layout_fits = true) {
  CodegenGuard restore;
  codegen::set_enabled(true);
  auto generated = CpuExecutable::compile(p);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ((*generated)->summary().row_kernels, row_kernels) << p.name;
  codegen::set_enabled(false);
  auto interpreted = CpuExecutable::compile(p);
  ASSERT_TRUE(interpreted.ok()) << interpreted.status();
  EXPECT_EQ((*interpreted)->summary().row_kernels, 0);
  const std::vector<Buffer> want = run_with_threads(**interpreted, args, 2);
  codegen::set_enabled(true);
  expect_same(want, run_unfused(p, args), p.name + " step by step vs op by op");
  const RowKernelRuns before = row_kernel_runs();
  for (int threads = 1; threads <= 4; ++threads) {
    expect_same(run_with_threads(**generated, args, threads), want,
                p.name + " row kernel with " + std::to_string(threads) + " threads");
  }
  const RowKernelRuns after = row_kernel_runs();
  const int64_t expected_runs = row_kernels > 0 && layout_fits ? 4 * row_kernels : 0;
  EXPECT_EQ(after.ran - before.ran, expected_runs) << p.name;
  EXPECT_EQ(after.layout_misfit - before.layout_misfit, row_kernels > 0 && !layout_fits ? 4 * row_kernels : 0)
      << p.name;
}

// softmax over the last axis as the trace library builds it (the row max and sum reshaped to [R, 1]).
ValueId softmax(ir::ProgramBuilder& b, ValueId x, const Ints& dims) {
  const int64_t R = dims[0];
  Ints keep_shape = {R, 1};
  auto m = b.reshape(b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{1}}}), concrete_shape(keep_shape));
  auto safe = b.select(b.unary(OpKind::kIsFinite, m), m, b.full_like(m, 0.0));
  auto e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, x, b.broadcast_in_dim(safe, concrete_shape(dims), {0, 1})));
  auto s = b.reshape(b.reduce_sum(e, {1}), concrete_shape(keep_shape));
  return b.binary(OpKind::kDiv, e, b.broadcast_in_dim(s, concrete_shape(dims), {0, 1}));
}

// x with NaN, infinities and signed zeros planted in some rows (a row of only -inf, one with a NaN, ...).
Buffer with_specials(Buffer x, int64_t cols) {
  if (x.dtype() != DType::kFloat32 || x.num_elements() < 6 * cols) return x;
  float* p = x.mutable_data<float>();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < cols; ++c) p[c] = -inf;  // row 0: all -inf
  p[cols + cols / 2] = std::numeric_limits<float>::quiet_NaN();  // row 1: a NaN
  p[2 * cols + cols - 1] = inf;  // row 2: +inf last
  for (int64_t c = 0; c < cols; ++c) p[3 * cols + c] = (c % 2) ? 0.0f : -0.0f;  // row 3: signed zeros
  p[4 * cols] = std::numeric_limits<float>::denorm_min();
  p[5 * cols + 1] = -std::numeric_limits<float>::max();
  return x;
}

TEST(RowKernel, SoftmaxOverShortOddAndLongRows) {
  SKIP_WITHOUT_LLVM();
  // Long rows cross reduce_fastmath's 8192-element chunks; short and odd ones run the vector loops' tails.
  for (const Ints& dims : std::vector<Ints>{{64, 1024}, {37, 7}, {300, 10}, {6, 1031}, {5, 20000}, {9, 2}}) {
    ir::ProgramBuilder b("softmax" + dims_str(dims));
    auto x = b.add_parameter(av(DType::kFloat32, dims));
    ir::Program p = std::move(b).build({softmax(b, x, dims)});
    expect_row_kernel_matches(p, {with_specials(test::random_buffer(DType::kFloat32, dims, 21, -6, 6), dims[1])});
  }
}

TEST(RowKernel, SixteenBitAndDoubleRows) {
  SKIP_WITHOUT_LLVM();
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    const Ints dims = {70, 515};
    ir::ProgramBuilder b(std::string("softmax_") + std::string(dtype_short_name(t)));
    auto x = b.add_parameter(av(t, dims));
    ir::Program p = std::move(b).build({softmax(b, x, dims)});
    expect_row_kernel_matches(p, {test::random_buffer(t, dims, 22, -3, 3)});
  }
}

TEST(RowKernel, LayerNormWithEscapingStatisticsAndRowBroadcastInputs) {
  SKIP_WITHOUT_LLVM();
  // mean and variance over the row, normalised, scaled by a per-column gamma (a read broadcast over rows)
  // and shifted by a per-row offset (a read constant along each row); the mean escapes as a second result.
  const Ints dims = {129, 96};
  ir::ProgramBuilder b("layer_norm");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  auto gamma = b.add_parameter(av(DType::kFloat32, {96}));
  auto shift = b.add_parameter(av(DType::kFloat32, {129}));
  auto inv_n = b.full_like(b.reduce_sum(x, {1}), 1.0 / 96);
  auto mean = b.binary(OpKind::kMul, b.reduce_sum(x, {1}), inv_n);
  auto d = b.binary(OpKind::kSub, x, b.broadcast_in_dim(mean, concrete_shape(dims), {0}));
  auto var = b.binary(OpKind::kMul, b.reduce_sum(b.binary(OpKind::kMul, d, d), {1}), inv_n);
  auto rstd = b.unary(OpKind::kRsqrt, b.binary(OpKind::kAdd, var, b.full_like(var, 1e-5)));
  auto y = b.binary(OpKind::kMul, d, b.broadcast_in_dim(rstd, concrete_shape(dims), {0}));
  y = b.binary(OpKind::kMul, y, b.broadcast_in_dim(gamma, concrete_shape(dims), {1}));
  y = b.binary(OpKind::kAdd, y, b.broadcast_in_dim(shift, concrete_shape(dims), {0}));
  ir::Program p = std::move(b).build({y, mean});
  expect_row_kernel_matches(p, {test::random_buffer(DType::kFloat32, dims, 23, -2, 2),
                                test::random_buffer(DType::kFloat32, {96}, 24),
                                test::random_buffer(DType::kFloat32, {129}, 25)});
}

TEST(RowKernel, MaxMinAndProductReductions) {
  SKIP_WITHOUT_LLVM();
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const Ints dims = {41, 333};
    ir::ProgramBuilder b(std::string("minmaxprod_") + std::string(dtype_short_name(t)));
    auto x = b.add_parameter(av(t, dims));
    auto hi = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{1}}});
    auto lo = b.emit_or_throw(OpKind::kReduceMin, {x}, {{"dimensions", Ints{1}}});
    auto scaled = b.binary(OpKind::kDiv, b.binary(OpKind::kSub, x, b.broadcast_in_dim(lo, concrete_shape(dims), {0})),
                           b.broadcast_in_dim(b.binary(OpKind::kSub, hi, lo), concrete_shape(dims), {0}));
    auto prod = b.emit_or_throw(OpKind::kReduceProd, {b.binary(OpKind::kAdd, scaled, b.full_like(scaled, 0.5))},
                                {{"dimensions", Ints{1}}});
    ir::Program p = std::move(b).build({scaled, prod});
    Buffer in = test::random_buffer(t, dims, 26, -4, 4);
    expect_row_kernel_matches(p, {t == DType::kFloat32 ? with_specials(in, dims[1]) : in});
  }
}

TEST(RowKernel, AttentionSoftmaxOverTheLastAxisOfRankFourWithABroadcastMask) {
  SKIP_WITHOUT_LLVM();
  // scores [B, H, T, T] + a mask [T, T] broadcast over batch and heads, softmax over the last axis: rows are
  // (b, h, t), and the mask's rows restart at every (b, h), so the kernel runs once per (b, h).
  const Ints dims = {2, 3, 5, 7}, rows = {2, 3, 5, 1};
  ir::ProgramBuilder b("attention_softmax");
  auto scores = b.add_parameter(av(DType::kFloat32, dims));
  auto mask = b.add_parameter(av(DType::kFloat32, {5, 7}));
  auto x = b.binary(OpKind::kAdd, scores, b.broadcast_in_dim(mask, concrete_shape(dims), {2, 3}));
  auto m = b.reshape(b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{3}}}), concrete_shape(rows));
  auto e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, x, b.broadcast_in_dim(m, concrete_shape(dims), {0, 1, 2, 3})));
  auto s = b.reshape(b.reduce_sum(e, {3}), concrete_shape(rows));
  ir::Program p = std::move(b).build({b.binary(OpKind::kDiv, e, b.broadcast_in_dim(s, concrete_shape(dims), {0, 1, 2, 3}))});
  // A causal mask: -1e9 above the diagonal (exp of it is +0 without libmvec's slow path, vmath.h), small
  // values elsewhere.
  Buffer mask_values = test::random_buffer(DType::kFloat32, {5, 7}, 31, -2, 0);
  for (int i = 0; i < 5; ++i) {
    for (int j = i + 1; j < 7; ++j) mask_values.mutable_data<float>()[i * 7 + j] = -1e9f;
  }
  expect_row_kernel_matches(p, {test::random_buffer(DType::kFloat32, dims, 30, -4, 4), mask_values});
}

TEST(RowKernel, LayerNormOverTheLastAxisOfRankThree) {
  SKIP_WITHOUT_LLVM();
  const Ints dims = {3, 17, 40};
  ir::ProgramBuilder b("layer_norm_rank3");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  auto mean = b.binary(OpKind::kMul, b.reduce_sum(x, {2}), b.full_like(b.reduce_sum(x, {2}), 1.0 / 40));
  auto d = b.binary(OpKind::kSub, x, b.broadcast_in_dim(mean, concrete_shape(dims), {0, 1}));
  auto var = b.reduce_sum(b.binary(OpKind::kMul, d, d), {2});
  auto y = b.binary(OpKind::kMul, d, b.broadcast_in_dim(b.unary(OpKind::kRsqrt, var), concrete_shape(dims), {0, 1}));
  ir::Program p = std::move(b).build({y});
  expect_row_kernel_matches(p, {test::random_buffer(DType::kFloat32, dims, 32, -2, 2)});
}

TEST(RowKernel, RegionsThatAreNotRowProgramsRunStepByStep) {
  SKIP_WITHOUT_LLVM();
  // A reduction over the middle axis of [R, A, B] leaves A elements per row: neither a row scalar nor a row.
  const Ints dims = {20, 6, 5};
  ir::ProgramBuilder b("middle_axis");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  auto s1 = b.reduce_sum(x, {1});
  auto y = b.binary(OpKind::kMul, b.unary(OpKind::kExp, x), b.broadcast_in_dim(s1, concrete_shape(dims), {0, 2}));
  ir::Program p = std::move(b).build({b.reduce_sum(y, {1, 2})});
  expect_row_kernel_matches(p, {test::random_buffer(DType::kFloat32, dims, 27)}, /*row_kernels=*/0);
}

TEST(RowKernel, AReadWhoseLayoutDoesNotFitRunsStepByStep) {
  SKIP_WITHOUT_LLVM();
  // softmax of a transposed parameter: the transpose is a view made before the region, so its rows are
  // strided; the kernel is generated but this read makes the region run its steps.
  const Ints dims = {48, 33};
  ir::ProgramBuilder b("softmax_of_transpose");
  auto xt = b.add_parameter(av(DType::kFloat32, {33, 48}));
  auto x = b.transpose(xt, {1, 0});
  ir::Program p = std::move(b).build({softmax(b, x, dims)});
  expect_row_kernel_matches(p, {test::random_buffer(DType::kFloat32, {33, 48}, 28, -3, 3)}, 1, /*layout_fits=*/false);
}

TEST(RowKernel, SerialisedExecutablesKeepTheirRowKernels) {
  SKIP_WITHOUT_LLVM();
  const Ints dims = {200, 77};
  ir::ProgramBuilder b("softmax_serialised");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  ir::Program p = std::move(b).build({softmax(b, x, dims)});
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok()) << exe.status();
  ASSERT_EQ((*exe)->summary().row_kernels, 1);
  auto bytes = (*exe)->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto loaded = CpuExecutable::deserialize(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->summary().row_kernels, 1);
  const std::vector<Buffer> args = {test::random_buffer(DType::kFloat32, dims, 29, -5, 5)};
  expect_same(run_with_threads(**loaded, args, 3), run_with_threads(**exe, args, 2), "loaded vs compiled");
}

}  // namespace
}  // namespace mcx::cpu::testing
