// The GPU's reduction kernels, checked without a GPU: every kind with every dtype, over last, leading, middle,
// all and no axes, generated and assembled for sm_90 and sm_80 without spills; bad specs refused. The values
// are the gpu label's (GpuReductions.*).
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/codegen/kernel_source.h"
#include "mcx/backend/cuda/ptx_assembler.h"

namespace mcx::cuda::codegen {
namespace {

using ir::OpKind;

TEST(CudaReduceKernel, EveryKindDtypeAndAxesAssemblesForHopperAndAmpere) {
  int done = 0;
  for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceProd, OpKind::kReduceMax, OpKind::kReduceMin}) {
    for (DType t : {DType::kBool, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
                    DType::kUInt32, DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
      for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{{2}, {0}, {1}, {0, 1, 2}, {}}) {
        const ReduceKernelSpec spec{kind, t, {16, 3, 40}, axes};
        SCOPED_TRACE(absl::StrCat(std::string(ir::op_name(kind)), " ", std::string(dtype_short_name(t)), " axes ",
                                  axes.size()));
        for (int arch : {90, 80}) {
          absl::StatusOr<PtxKernel> k = generate_ptx_kernel(spec, arch, "r");
          ASSERT_TRUE(k.ok()) << k.status();
          absl::StatusOr<AssembledKernel> a = assemble_ptx(k->ptx, arch);
          ASSERT_TRUE(a.ok()) << a.status() << "\n" << k->ptx;
          EXPECT_THAT(a->info, ::testing::HasSubstr("0 bytes spill stores, 0 bytes spill loads"));
        }
        ++done;
      }
    }
  }
  EXPECT_EQ(done, 4 * 11 * 5);
  // arg_max and arg_min over each axis, every dtype, both index dtypes.
  for (OpKind kind : {OpKind::kArgMax, OpKind::kArgMin}) {
    for (DType t : {DType::kBool, DType::kInt8, DType::kUInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                    DType::kFloat32, DType::kFloat64}) {
      for (int64_t axis : {0, 1, 2}) {
        for (DType index : {DType::kInt32, DType::kInt64}) {
          SCOPED_TRACE(absl::StrCat(std::string(ir::op_name(kind)), " ", std::string(dtype_short_name(t)), " axis ", axis));
          absl::StatusOr<PtxKernel> k = generate_ptx_kernel(ReduceKernelSpec{kind, t, {16, 3, 40}, {axis}, index}, 90, "a");
          ASSERT_TRUE(k.ok()) << k.status();
          ASSERT_TRUE(assemble_ptx(k->ptx, 90).ok());
        }
      }
    }
  }
}

TEST(CudaReduceKernel, BadSpecsAreRefused) {
  EXPECT_THAT(std::string(generate_ptx_kernel(ReduceKernelSpec{OpKind::kAdd, DType::kFloat32, {4}, {0}}, 90, "r").status().message()),
              ::testing::HasSubstr("reduce kernel of add: expected reduce_sum"));
  EXPECT_THAT(std::string(generate_ptx_kernel(ReduceKernelSpec{OpKind::kArgMax, DType::kFloat32, {4, 4}, {0, 1}}, 90, "r").status().message()),
              ::testing::HasSubstr("argmax kernel over 2 axes; expected one"));
  EXPECT_EQ(generate_ptx_kernel(ReduceKernelSpec{OpKind::kReduceSum, DType::kFloat32, {4, 4}, {1, 0}}, 90, "r").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(generate_ptx_kernel(ReduceKernelSpec{OpKind::kReduceSum, DType::kFloat32, {4}, {1}}, 90, "r").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mcx::cuda::codegen
