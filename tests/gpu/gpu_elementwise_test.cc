// The differential test of the CUDA backend (label gpu): every element-wise op with every dtype the code
// generators take (tests/support/backend/element_cases.h), run on the GPU and on the CPU in one process over
// inputs full of special values, compared within the bounds docs/gpu.md states:
//   - bit for bit for arithmetic, comparisons, conversions, integer ops and the float16/bfloat16 rounding
//     (the same IEEE operations in the same order), except that NaN results need only both be NaN (the GPU's
//     arithmetic makes a different NaN bit pattern than x86's);
//   - within kTranscendentalUlps ulp for the math functions (libdevice on the GPU, vmath on the CPU), and within
//     1 ulp once rounded to float16/bfloat16; results below the smallest normal number agree as such (the CPU
//     returns +0 for exp below its threshold where libdevice returns a subnormal).
// Plus layout ops (broadcast, transpose, slice, reverse, reshape) and transfers of every dtype.
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/spmd_rules.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/backend/element_cases.h"

namespace mcx::test {
namespace {

using ir::OpKind;

constexpr int64_t kTranscendentalUlps = 8;

bool transcendental(OpKind k) {
  switch (k) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kLog1p: case OpKind::kExpm1: case OpKind::kTanh:
    case OpKind::kSin: case OpKind::kCos: case OpKind::kErf: case OpKind::kErfc: case OpKind::kErfInv:
    case OpKind::kPow: case OpKind::kLogistic:
      return true;
    default:
      return false;
  }
}

// Bits of element i as an integer ordered like the float values (negative floats mirrored below zero).
int64_t ordered_bits(const Buffer& b, int64_t i, int* width) {
  const size_t size = dtype_size(b.dtype());
  *width = static_cast<int>(8 * size);
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const std::byte*>(b.data()) + i * static_cast<int64_t>(size), size);
  const uint64_t sign = uint64_t{1} << (*width - 1);
  const auto magnitude = static_cast<int64_t>(bits & (sign - 1));
  return (bits & sign) != 0 ? -magnitude : magnitude;
}

double smallest_normal(DType t) {
  switch (t) {
    case DType::kFloat16: return 6.103515625e-05;
    case DType::kBFloat16: case DType::kFloat32: return 1.1754943508222875e-38;
    default: return 2.2250738585072014e-308;
  }
}

// "" when gpu and cpu agree within the bounds above, else the first difference.
std::string compare(const ElementCase& c, const Buffer& gpu, const Buffer& cpu) {
  if (gpu.dtype() != cpu.dtype() || gpu.dims() != cpu.dims()) return "different types";
  const bool floating = is_floating(gpu.dtype());
  const bool narrow = gpu.dtype() == DType::kFloat16 || gpu.dtype() == DType::kBFloat16;
  for (int64_t i = 0; i < gpu.num_elements(); ++i) {
    int width = 0;
    const int64_t g = ordered_bits(gpu, i, &width);
    const int64_t h = ordered_bits(cpu, i, &width);
    if (g == h) continue;
    if (floating) {
      const double gv = value_at(gpu, i), hv = value_at(cpu, i);
      if (std::isnan(gv) && std::isnan(hv)) continue;
      if (transcendental(c.kind)) {
        const int64_t bound = narrow ? 1 : kTranscendentalUlps;
        if (std::abs(g - h) <= bound) continue;
        const double tiny = smallest_normal(gpu.dtype());
        if (std::abs(gv) < tiny && std::abs(hv) < tiny) continue;
      }
      return absl::StrCat("element ", i, ": gpu ", gv, " cpu ", hv, " (", std::abs(g - h), " ulp)");
    }
    return absl::StrCat("element ", i, ": gpu ", value_at(gpu, i), " cpu ", value_at(cpu, i));
  }
  return "";
}

TEST(GpuElementwise, EveryOpAndDtypeAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<ElementCase> cases = all_element_cases();
  ASSERT_GE(cases.size(), 350u);
  int compared = 0;
  for (const ElementCase& c : cases) {
    SCOPED_TRACE(element_case_name(c));
    const int64_t n = 4099;  // not a multiple of the block size
    ir::ProgramBuilder b("case");
    std::vector<ir::ValueId> params;
    for (DType t : c.leaves) params.push_back(b.add_parameter(AbstractValue{t, concrete_shape({n})}));
    absl::StatusOr<ir::ValueId> r =
        c.kind == OpKind::kConvert
            ? b.emit(c.kind, params, ir::Attrs().set("dtype", c.result))
            : b.emit(c.kind, params);
    if (!r.ok()) continue;  // a case of the code generators' rules that no program holds (abs of bool)
    const ir::Program program = std::move(b).build({*r});
    std::vector<Buffer> args;
    for (size_t a = 0; a < c.leaves.size(); ++a) args.push_back(interesting_values(c.leaves[a], n, 31 + a));
    absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
    absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const std::string diff = compare(c, (*gpu)[0], (*cpu)[0]);
    EXPECT_EQ(diff, "") << element_case_name(c);
    ++compared;
  }
  std::printf("[gpu] %d op/dtype cases agree with the CPU\n", compared);
}

// broadcast_in_dim, transpose, slice with strides, reverse and reshape, feeding an element-wise chain.
TEST(GpuLayout, LayoutOpsAndChainsAgreeWithTheCpu) {
  SKIP_WITHOUT_GPU();
  ir::ProgramBuilder b("layout");
  const ir::ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({6, 10})});
  const ir::ValueId row = b.add_parameter(AbstractValue{DType::kBFloat16, concrete_shape({10})});
  const ir::ValueId t = b.transpose(x, {1, 0});                                  // [10, 6]
  const ir::ValueId rt = b.reshape(t, concrete_shape({60}));
  const ir::ValueId rev = b.emit_or_throw(OpKind::kReverse, {rt}, ir::Attrs().set("dimensions", std::vector<int64_t>{0}));
  const ir::ValueId sl = b.emit_or_throw(OpKind::kSlice, {rev},
                                         ir::Attrs()
                                             .set("start", concrete_shape({3}))
                                             .set("limit", concrete_shape({57}))
                                             .set("strides", std::vector<int64_t>{2}));  // [27]
  const ir::ValueId bc = b.broadcast_in_dim(b.convert(row, DType::kFloat32), concrete_shape({6, 10}), {1});
  const ir::ValueId y = b.binary(OpKind::kMul, b.unary(OpKind::kExp, x), bc);
  const ir::ValueId z = b.binary(OpKind::kAdd, y, b.full_like(y, 1.0));
  const ir::Program program = std::move(b).build({z, sl, t});
  const std::vector<Buffer> args = {interesting_values(DType::kFloat32, 60, 1).reshaped({6, 10}),
                                    interesting_values(DType::kBFloat16, 10, 2)};
  absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
  absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const ElementCase exp_case{OpKind::kExp, DType::kFloat32, DType::kFloat32, {}};
  EXPECT_EQ(compare(exp_case, (*gpu)[0], (*cpu)[0]), "");
  EXPECT_TRUE((*gpu)[1].bitwise_equal((*cpu)[1])) << (*gpu)[1].to_string() << "\n" << (*cpu)[1].to_string();
  EXPECT_TRUE((*gpu)[2].bitwise_equal((*cpu)[2]));
}

TEST(GpuTransfers, EveryDtypeRoundTripsAtEverySize) {
  SKIP_WITHOUT_GPU();
  Platform& cuda = platform("cuda");
  for (DType t : {DType::kBool, DType::kInt8, DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                  DType::kFloat32, DType::kFloat64}) {
    // Empty, small, and larger than two staging chunks (three chunks in flight through two buffers).
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{5} << 20}) {
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), "[", n, "]"));
      const Buffer host = interesting_values(t, n, 7);
      absl::StatusOr<std::shared_ptr<const DeviceBuffer>> dev = cuda.from_host(host, 0);
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_EQ((*dev)->platform(), "cuda");
      EXPECT_EQ((*dev)->host_buffer(), nullptr);
      absl::StatusOr<Buffer> back = cuda.to_host(**dev);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(back->bitwise_equal(host));
    }
  }
  EXPECT_EQ(cuda.from_host(Buffer::zeros(DType::kFloat32, {4}), 99).status().code(), absl::StatusCode::kInvalidArgument);
}

// arg_max and arg_min over each axis of inputs full of special values (NaN first wins, ties keep the first):
// the CPU's indices exactly.
TEST(GpuReductions, ArgMaxAndArgMinGiveTheCpusIndices) {
  SKIP_WITHOUT_GPU();
  for (OpKind kind : {OpKind::kArgMax, OpKind::kArgMin}) {
    for (DType t : {DType::kBool, DType::kInt8, DType::kUInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                    DType::kFloat32, DType::kFloat64}) {
      for (int64_t axis : {0, 1, 2}) {
        SCOPED_TRACE(absl::StrCat(std::string(ir::op_name(kind)), " ", std::string(dtype_short_name(t)), " axis ", axis));
        ir::ProgramBuilder b("arg");
        const ir::ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({33, 7, 65})});
        const ir::ValueId a = b.emit_or_throw(kind, {x}, {{"dimension", axis}, {"index_dtype", DType::kInt32}});
        const ir::Program program = std::move(b).build({a});
        const std::vector<Buffer> args = {interesting_values(t, 33 * 7 * 65, 9).reshaped({33, 7, 65})};
        absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
        absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        EXPECT_TRUE((*gpu)[0].bitwise_equal((*cpu)[0]));
      }
    }
  }
}

// Every reduction kind and dtype over last, leading, middle and all axes (and an empty axis): max, min and
// integer results bit for bit; float sums and products within the error bound of summing n terms in another
// order (2 n u of the sum of the terms' magnitudes, computed in float64 on the CPU; 2 n u of the product's
// magnitude; u of the accumulation type, float32 for float16/bfloat16) plus the result's rounding. Where a
// partial result can leave the accumulation type's range (terms' magnitudes adding up past its largest value;
// a product of the largest or of the smallest terms' magnitudes past its largest or below its smallest normal
// value), whether and where it overflows or underflows depends on the order (inf times 0 is NaN), and any
// result is accepted.
TEST(GpuReductions, EveryKindAndDtypeAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::vector<int64_t>> axes_cases = {{2}, {0}, {1}, {0, 2}, {0, 1, 2}};
  int compared = 0;
  for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceProd, OpKind::kReduceMax, OpKind::kReduceMin}) {
    for (DType t : {DType::kBool, DType::kInt8, DType::kInt32, DType::kInt64, DType::kUInt32, DType::kFloat16,
                    DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
      for (const std::vector<int64_t>& axes : axes_cases) {
        for (int64_t middle : {int64_t{7}, int64_t{0}}) {
          SCOPED_TRACE(absl::StrCat(std::string(ir::op_name(kind)), " ", std::string(dtype_short_name(t)), " axes ",
                                    axes.size(), " middle ", middle));
          ir::ProgramBuilder b("reduce");
          const ir::ValueId x = b.add_parameter(AbstractValue{t, concrete_shape({33, middle, 65})});
          absl::StatusOr<ir::ValueId> r = b.emit(kind, {x}, {{"dimensions", axes}});
          if (!r.ok()) continue;  // a kind the op table does not take for this dtype
          const ir::Program program = std::move(b).build({*r});
          const std::vector<Buffer> args = {interesting_values(t, 33 * middle * 65, 5).reshaped({33, middle, 65})};
          absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
          absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
          ASSERT_TRUE(gpu.ok()) << gpu.status();
          ASSERT_TRUE(cpu.ok()) << cpu.status();
          const bool exact = !is_floating(t) || kind == OpKind::kReduceMax || kind == OpKind::kReduceMin;
          if (exact) {
            const ElementCase c{OpKind::kMax, t, t, {}};
            EXPECT_EQ(compare(c, (*gpu)[0], (*cpu)[0]), "");
          } else {
            // Per result, in float64: the sum, the largest and the smallest of the terms' magnitudes.
            ir::ProgramBuilder mb("magnitudes");
            const ir::ValueId mx = mb.add_parameter(AbstractValue{t, concrete_shape({33, middle, 65})});
            const ir::ValueId abs = mb.unary(OpKind::kAbs, mb.convert(mx, DType::kFloat64));
            std::vector<ir::ValueId> stats;
            for (OpKind k : {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceMin}) {
              stats.push_back(mb.emit_or_throw(k, {abs}, {{"dimensions", axes}}));
            }
            absl::StatusOr<std::vector<Buffer>> magnitudes = run_program(platform("cpu"), std::move(mb).build(stats), args);
            ASSERT_TRUE(magnitudes.ok()) << magnitudes.status();
            int64_t terms = 1;
            for (int64_t a : axes) terms *= std::vector<int64_t>{33, middle, 65}[a];
            const bool narrow = t == DType::kFloat16 || t == DType::kBFloat16;
            const double u = t == DType::kFloat64 ? 0x1p-53 : 0x1p-24;
            const double result_u = t == DType::kFloat16 ? 0x1p-11 : t == DType::kBFloat16 ? 0x1p-8 : u;
            const double largest = t == DType::kFloat64 ? 1.7976931348623157e308 : 3.4028234663852886e38;
            const double max_exponent = t == DType::kFloat64 ? 1023 : 127, min_exponent = t == DType::kFloat64 ? -1022 : -126;
            for (int64_t i = 0; i < (*gpu)[0].num_elements(); ++i) {
              const double g = value_at((*gpu)[0], i), h = value_at((*cpu)[0], i);
              if ((std::isnan(g) && std::isnan(h)) || g == h) continue;
              const double magnitude = value_at((*magnitudes)[0], i);
              if (kind == OpKind::kReduceSum && !(magnitude < largest)) continue;  // overflow depends on order
              if (kind == OpKind::kReduceProd) {
                const double most = value_at((*magnitudes)[1], i), least = value_at((*magnitudes)[2], i);
                const double n = static_cast<double>(terms);
                if (!(n * std::log2(most) < max_exponent) || !(n * std::log2(least) > min_exponent)) continue;
              }
              const double scale = kind == OpKind::kReduceSum ? magnitude : std::max(std::abs(g), std::abs(h));
              const double bound = 2.0 * static_cast<double>(terms) * u * scale +
                                   (narrow ? 2.0 : 0.0) * result_u * std::max(std::abs(g), std::abs(h));
              EXPECT_LE(std::abs(g - h), bound) << "element " << i << ": gpu " << g << " cpu " << h;
            }
          }
          ++compared;
        }
      }
    }
  }
  std::printf("[gpu] %d reductions agree with the CPU\n", compared);
}

// Long rows are reduced in two passes (partials over interleaved chunks, then each row's partials): rows of
// 4096, one whole array of 2^16, and two trailing axes, against the CPU: max, min and integers bit for bit,
// float sums within 2 n u of the sum of magnitudes (float16 partials are kept in float).
TEST(GpuReductions, LongRowsInTwoPassesAgreeWithTheCpu) {
  SKIP_WITHOUT_GPU();
  struct LongCase {
    std::vector<int64_t> dims, axes;
  };
  for (const LongCase& c : {LongCase{{6, 4096}, {1}}, LongCase{{1 << 16}, {0}}, LongCase{{3, 64, 128}, {1, 2}}}) {
    for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceMin}) {
      for (DType t : {DType::kInt32, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
        SCOPED_TRACE(absl::StrCat(std::string(ir::op_name(kind)), " ", std::string(dtype_short_name(t)), " rank ",
                                  c.dims.size()));
        int64_t n = 1;
        for (int64_t d : c.dims) n *= d;
        ir::ProgramBuilder b("long");
        const ir::ValueId x = b.add_parameter(AbstractValue{t, concrete_shape(c.dims)});
        const ir::ValueId r = b.emit_or_throw(kind, {x}, {{"dimensions", c.axes}});
        // Finite values (a NaN or an infinity would decide every result alone).
        ir::ProgramBuilder fb("finite");
        const ir::ValueId fx = fb.add_parameter(AbstractValue{t, concrete_shape({n})});
        const ir::ValueId zero = fb.full_like(fx, 0.0);
        const ir::ValueId ok = is_floating(t) ? fb.unary(OpKind::kIsFinite, fx) : fb.binary(OpKind::kEq, fx, fx);
        const ir::Program finite = std::move(fb).build({fb.select(ok, fx, zero)});
        const Buffer values =
            run_program(platform("cpu"), finite, {interesting_values(t, n, 15)}).value()[0].reshaped(c.dims);
        const ir::Program program = std::move(b).build({r});
        absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, {values});
        absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, {values});
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        if (kind != OpKind::kReduceSum || !is_floating(t)) {
          EXPECT_EQ(compare(ElementCase{OpKind::kMax, t, t, {}}, (*gpu)[0], (*cpu)[0]), "");
          continue;
        }
        ir::ProgramBuilder mb("magnitudes");
        const ir::ValueId mx = mb.add_parameter(AbstractValue{t, concrete_shape(c.dims)});
        const ir::ValueId m = mb.emit_or_throw(OpKind::kReduceSum, {mb.unary(OpKind::kAbs, mb.convert(mx, DType::kFloat64))},
                                               {{"dimensions", c.axes}});
        const Buffer magnitudes = run_program(platform("cpu"), std::move(mb).build({m}), {values}).value()[0];
        int64_t terms = 1;
        for (int64_t a : c.axes) terms *= c.dims[a];
        const double u = t == DType::kFloat64 ? 0x1p-53 : 0x1p-24;
        const double result_u = t == DType::kFloat16 ? 0x1p-11 : u;
        for (int64_t i = 0; i < (*gpu)[0].num_elements(); ++i) {
          const double g = value_at((*gpu)[0], i), h = value_at((*cpu)[0], i);
          if (g == h || (std::isinf(g) && std::isinf(h) && t == DType::kFloat16)) continue;  // both overflow float16
          const double bound = 2.0 * static_cast<double>(terms) * u * value_at(magnitudes, i) +
                               2.0 * result_u * std::max(std::abs(g), std::abs(h));
          EXPECT_LE(std::abs(g - h), bound) << "element " << i << ": gpu " << g << " cpu " << h;
        }
      }
    }
  }
}

// dot_general through cuBLASLt against the CPU (OpenBLAS and its own kernels) over the layouts a model uses:
// plain, transposed operands, batched with the batch axis anywhere, and an empty contraction. float32 runs on
// TF32 by default: within 2e-2 relative to the largest product term (10-bit mantissas); with
// MCX_GPU_MATMUL_PRECISION=highest (GpuProducts.FullFloat32*) and for float64 the bound is 1e-5 / 1e-12.
struct DotCase {
  std::vector<int64_t> lhs, rhs, lb, lc, rb, rc;
};

void check_products(DType t, double rel) {
  const std::vector<DotCase> cases = {
      {{64, 48}, {48, 32}, {}, {1}, {}, {0}},           // x @ w
      {{64, 48}, {32, 48}, {}, {1}, {}, {1}},           // x @ w.T
      {{48, 64}, {48, 32}, {}, {0}, {}, {0}},           // x.T @ w
      {{5, 17, 9}, {5, 9, 11}, {0}, {2}, {0}, {1}},     // batched
      {{9, 5, 17}, {11, 9, 5}, {1}, {0}, {2}, {1}},     // batch and contracting axes elsewhere
      {{7, 0}, {0, 3}, {}, {1}, {}, {0}},               // an empty sum: zeros
  };
  for (const DotCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), " lhs rank ", c.lhs.size(), " k-axis ", c.lc[0]));
    ir::ProgramBuilder b("dot");
    const ir::ValueId x = b.add_parameter(AbstractValue{t, concrete_shape(c.lhs)});
    const ir::ValueId y = b.add_parameter(AbstractValue{t, concrete_shape(c.rhs)});
    const ir::ValueId d = b.emit_or_throw(OpKind::kDotGeneral, {x, y},
                                          {{"lhs_batch", c.lb}, {"lhs_contracting", c.lc}, {"rhs_batch", c.rb},
                                           {"rhs_contracting", c.rc}});
    const ir::Program program = std::move(b).build({d});
    int64_t nl = 1, nr = 1;
    for (int64_t v : c.lhs) nl *= v;
    for (int64_t v : c.rhs) nr *= v;
    // Values in [-2, 2]: no special values (a NaN or an infinity would make every sum NaN).
    auto values = [&](int64_t n, uint64_t seed, const std::vector<int64_t>& dims) {
      Buffer out = Buffer::uninitialized(t, dims);
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<double> u(-2, 2);
      dispatch_dtype(t, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
          for (int64_t i = 0; i < n; ++i) out.mutable_data<T>()[i] = T(static_cast<float>(u(rng)));
        } else if constexpr (std::is_floating_point_v<T>) {
          for (int64_t i = 0; i < n; ++i) out.mutable_data<T>()[i] = static_cast<T>(u(rng));
        }
      });
      return out;
    };
    const std::vector<Buffer> args = {values(nl, 1, c.lhs), values(nr, 2, c.rhs)};
    absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
    absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const int64_t k = c.lhs[c.lc[0]];
    for (int64_t i = 0; i < (*gpu)[0].num_elements(); ++i) {
      const double g = value_at((*gpu)[0], i), h = value_at((*cpu)[0], i);
      // Each term is at most 4 in size: the bound scales with the sum's length.
      ASSERT_LE(std::abs(g - h), rel * 4.0 * static_cast<double>(std::max<int64_t>(k, 1))) << "element " << i;
    }
  }
}

TEST(GpuProducts, EveryFloatDtypeAndLayoutAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  check_products(DType::kFloat32, 2e-3);   // TF32 (the default): 10-bit mantissas
  check_products(DType::kFloat64, 1e-13);
  check_products(DType::kFloat16, 2e-3);
  check_products(DType::kBFloat16, 1.6e-2);
}

// mcx::random's primitives: threefry2x32 gives the CPU's bits exactly (the "bit-identical RNG"), over
// iota-made counters concatenated into pairs, as split and uniform make them.
TEST(GpuRandom, ThreefryIotaAndConcatenateGiveTheCpusBits) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    SCOPED_TRACE(n);
    ir::ProgramBuilder b("random");
    const ir::ValueId key = b.add_parameter(AbstractValue{DType::kUInt32, concrete_shape({2})});
    const ir::ValueId i = b.emit_or_throw(OpKind::kIota, {}, {{"dtype", DType::kUInt32}, {"dimension", int64_t{0}},
                                                              {"shape", concrete_shape({n, 1})}});
    const ir::ValueId j = b.emit_or_throw(OpKind::kIota, {}, {{"dtype", DType::kFloat16}, {"dimension", int64_t{1}},
                                                              {"shape", concrete_shape({n, 3})}});
    const ir::ValueId pairs = b.emit_or_throw(OpKind::kConcatenate, {i, b.binary(OpKind::kMul, i, i)},
                                              {{"dimension", int64_t{1}}});
    const ir::ValueId bits = b.emit_or_throw(OpKind::kThreefry2x32, {key, pairs});
    const ir::Program program = std::move(b).build({bits, j, pairs});
    const std::vector<Buffer> args = {Buffer::from_vector<uint32_t>({0x12345678u, 0x9abcdef0u}, {2})};
    absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
    absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    for (size_t r = 0; r < 3; ++r) EXPECT_TRUE((*gpu)[r].bitwise_equal((*cpu)[r])) << "result " << r;
  }
}

}  // namespace
}  // namespace mcx::test
