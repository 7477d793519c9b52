// The differential test of the CUDA backend's windowed kernels (label gpu; emulated on the host as
// emulated_gpu/... on every machine): reduce_window (sum, max, min) over every window case and several dtypes,
// the CPU's results bit for bit (the same order and accumulation type; NaNs as NaNs); conv_general_dilated over
// every convolution case (strides, paddings also negative, lhs and rhs dilations as the gradients use them,
// feature groups, depthwise, permuted layouts, 1-D to 3-D, the weight-gradient shape), within the error bound
// of summing the products in another order: 2 n u of the sum of the products' magnitudes (computed in float64
// on the CPU), u of the accumulation type (float32 for float16/bfloat16), plus the result's rounding.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/builder.h"
#include "tests/gpu/gpu_test_support.h"
#include "tests/support/backend/element_cases.h"
#include "tests/support/test_util.h"
#include "tests/support/window_cases.h"

namespace mcx::test {
namespace {

using ir::OpKind;
using ir::ValueId;

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

TEST(GpuWindow, ReduceWindowIsTheCpusBitForBit) {
  SKIP_WITHOUT_GPU();
  int compared = 0;
  for (const WindowCase& c : window_cases()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (DType t : {DType::kInt32, DType::kUInt8, DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
        SCOPED_TRACE(absl::StrCat(c.name, " op ", static_cast<int>(op), " ", std::string(dtype_short_name(t))));
        const ir::Program program =
            single_op_program(OpKind::kReduceWindow, {AbstractValue{t, concrete_shape(c.dims)}}, window_attrs(c, op));
        const std::vector<Buffer> args = {interesting_values(t, product(c.dims), 12).reshaped(c.dims)};
        absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
        absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        for (int64_t i = 0; i < (*gpu)[0].num_elements(); ++i) {
          const double g = value_at((*gpu)[0], i), h = value_at((*cpu)[0], i);
          if (std::isnan(g) && std::isnan(h)) continue;
          ASSERT_EQ(std::signbit(g), std::signbit(h)) << "element " << i << ": gpu " << g << " cpu " << h;
          ASSERT_EQ(g, h) << "element " << i;
        }
        ++compared;
      }
    }
  }
  std::printf("[gpu] %d reduce_window cases agree with the CPU\n", compared);
}

// Uniform values in [-1, 1) (no specials: a convolution's sum of products is compared within a bound).
Buffer uniform(DType t, const std::vector<int64_t>& dims, uint64_t seed) {
  const int64_t n = product(dims);
  Buffer out = Buffer::zeros(DType::kFloat64, {n});
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    out.mutable_data<double>()[i] = static_cast<double>(s >> 11) * 0x1p-52 - 1.0;
  }
  ir::ProgramBuilder b("cast");
  const ValueId x = b.add_parameter(AbstractValue{DType::kFloat64, concrete_shape({n})});
  const ir::Program cast = std::move(b).build({b.convert(x, t)});
  return run_program(platform("cpu"), cast, {out}).value()[0].reshaped(dims);
}

TEST(GpuWindow, ConvolutionsAgreeWithTheCpuWithinTheSumsRounding) {
  SKIP_WITHOUT_GPU();
  int compared = 0;
  std::vector<ConvCase> cases = conv_cases();
  for (const ConvCase& c : winograd_conv_cases()) cases.push_back(c);
  for (const ConvCase& c : cases) {
    for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(absl::StrCat(c.name, " ", std::string(dtype_short_name(t))));
      const ir::Program program = single_op_program(
          OpKind::kConvGeneralDilated, {AbstractValue{t, concrete_shape(c.lhs)}, AbstractValue{t, concrete_shape(c.rhs)}},
          c.attrs());
      const std::vector<Buffer> args = {uniform(t, c.lhs, 13), uniform(t, c.rhs, 14)};
      absl::StatusOr<std::vector<Buffer>> gpu = run_program(platform("cuda"), program, args);
      absl::StatusOr<std::vector<Buffer>> cpu = run_program(platform("cpu"), program, args);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      // The sum of the products' magnitudes, per result element, in float64 on the CPU.
      ir::ProgramBuilder mb("magnitudes");
      const ValueId l = mb.add_parameter(AbstractValue{t, concrete_shape(c.lhs)});
      const ValueId r = mb.add_parameter(AbstractValue{t, concrete_shape(c.rhs)});
      const ValueId m = mb.emit_or_throw(OpKind::kConvGeneralDilated,
                                         {mb.unary(OpKind::kAbs, mb.convert(l, DType::kFloat64)),
                                          mb.unary(OpKind::kAbs, mb.convert(r, DType::kFloat64))},
                                         c.attrs());
      absl::StatusOr<std::vector<Buffer>> magnitudes = run_program(platform("cpu"), std::move(mb).build({m}), args);
      ASSERT_TRUE(magnitudes.ok()) << magnitudes.status();
      const int64_t terms = product(c.rhs) / std::max<int64_t>(1, c.rhs[c.rhs_spec[0]]);
      const bool narrow = t == DType::kFloat16 || t == DType::kBFloat16;
      const double u = t == DType::kFloat64 ? 0x1p-53 : 0x1p-24;
      const double result_u = t == DType::kFloat16 ? 0x1p-11 : t == DType::kBFloat16 ? 0x1p-8 : u;
      for (int64_t i = 0; i < (*gpu)[0].num_elements(); ++i) {
        const double g = value_at((*gpu)[0], i), h = value_at((*cpu)[0], i);
        const double bound = 2.0 * static_cast<double>(terms) * u * value_at((*magnitudes)[0], i) +
                             (narrow ? 2.0 * result_u * std::max(std::abs(g), std::abs(h)) : 0.0);
        ASSERT_LE(std::abs(g - h), bound) << "element " << i << ": gpu " << g << " cpu " << h;
      }
      ++compared;
    }
  }
  std::printf("[gpu] %d convolutions agree with the CPU\n", compared);
}

}  // namespace
}  // namespace mcx::test
