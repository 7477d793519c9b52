// The CUDA platform's host side against the stand-in driver (tests/support/fake_cuda: one "GPU" of 64 MiB over
// host memory, copies done at once, device kernels not run; and the stand-in cuBLASLt), on machines without a
// GPU: the driver is found through MCX_CUDA_LIBRARY_PATH, the device opened, transfers of every dtype and size
// go through the staging chunks, the allocator's limit comes from MCX_GPU_MEMORY_FRACTION (0.5 here),
// reshape-only programs run without a kernel, a product runs through cuBLASLt, and a kernel launch's failure is
// named. What the kernels compute is checked by the gpu label's tests, emulated on the host and on a GPU.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/backend/cuda/cuda_platform.h"
#include "mcx/backend/cuda/driver_api.h"
#include "mcx/ir/builder.h"
#include "mcx/platform/platform_registry.h"
#include "tests/support/backend/element_cases.h"
#include "tests/support/cuda/registered_platforms.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;

Platform& cuda_platform() { return test::registered_platform("cuda"); }

TEST(FakeDriver, TheDriverIsFoundThroughMcxCudaLibraryPathAndTheDeviceOpened) {
  absl::StatusOr<const DriverApi*> api = cuda_driver();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_THAT((*api)->library, HasSubstr("fake_cuda/libcuda.so.1"));
  Platform& p = cuda_platform();
  ASSERT_TRUE(p.usable().ok()) << p.usable();
  EXPECT_EQ(p.device_count(), 1);
  std::map<std::string, std::string> key;
  for (const KeyComponent& c : p.compile_key()) key[c.name] = c.value;
  EXPECT_EQ(key["arch"], "sm_90");
  EXPECT_EQ(key["cuda_driver"], "13.0");
  EXPECT_THAT(key["ptx_assembler"], ::testing::StartsWith("nvJitLink 13."));
}

TEST(FakeDriver, EveryDtypeRoundTripsAtEverySizeThroughTheStagingChunks) {
  Platform& p = cuda_platform();
  for (DType t : {DType::kBool, DType::kInt8, DType::kInt64, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
    // Empty, small, exactly two chunks, and two and a half.
    for (int64_t bytes : {int64_t{0}, int64_t{8}, int64_t{16} << 20, int64_t{20} << 20}) {
      const int64_t n = bytes / static_cast<int64_t>(dtype_size(t));
      SCOPED_TRACE(absl::StrCat(std::string(dtype_short_name(t)), "[", n, "]"));
      const Buffer host = test::interesting_values(t, n, 3);
      absl::StatusOr<std::shared_ptr<const DeviceBuffer>> dev = p.from_host(host, 0);
      ASSERT_TRUE(dev.ok()) << dev.status();
      EXPECT_EQ((*dev)->describe(), absl::StrCat(std::string(dtype_short_name(t)), "[", n, "] on cuda"));
      absl::StatusOr<Buffer> back = p.to_host(**dev);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_TRUE(back->bitwise_equal(host));
    }
  }
  EXPECT_THAT(std::string(p.from_host(Buffer::zeros(DType::kFloat32, {2}), 1).status().message()),
              HasSubstr("local device 1 out of range: this process has 1 CUDA devices"));
  cpu::CpuDeviceBuffer cpu_buffer(Buffer::zeros(DType::kFloat32, {2}));
  EXPECT_THAT(std::string(p.to_host(cpu_buffer).status().message()), HasSubstr("not a cuda buffer"));
}

TEST(FakeDriver, TheMemoryFractionLimitsTheAllocatorAndTheErrorSaysSo) {
  Platform& p = cuda_platform();
  // 64 MiB of device memory, MCX_GPU_MEMORY_FRACTION=0.5: 32 MiB may be reserved.
  std::vector<std::shared_ptr<const DeviceBuffer>> held;
  for (int i = 0; i < 3; ++i) held.push_back(p.from_host(Buffer::zeros(DType::kFloat32, {2 << 20}), 0).value());  // 8 MiB each
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> over = p.from_host(Buffer::zeros(DType::kFloat32, {3 << 20}), 0);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("out of memory on GPU 0: cannot allocate 12.0 MiB; 24.0 MiB in use"));
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("limit of 32.0 MiB (MCX_GPU_MEMORY_FRACTION=0.5 of"));
  held.clear();  // the cached segments go back to make room
  EXPECT_TRUE(p.from_host(Buffer::zeros(DType::kFloat32, {7 << 20}), 0).ok());  // 28 MiB
}

TEST(FakeDriver, ProgramsWithoutKernelsRunAndAFailedLaunchIsNamed) {
  Platform& p = cuda_platform();
  ir::ProgramBuilder b("reshape_only");
  const ir::ValueId x = b.add_parameter(AbstractValue{DType::kInt32, concrete_shape({2, 3})});
  const ir::Program reshape = std::move(b).build({b.reshape(x, concrete_shape({3, 2})), x});
  absl::StatusOr<std::shared_ptr<const Executable>> exe = p.compile(reshape);
  ASSERT_TRUE(exe.ok()) << exe.status();
  const Buffer host = Buffer::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::shared_ptr<const DeviceBuffer> arg = p.from_host(host, 0).value();
  const DeviceBuffer* args[] = {arg.get()};
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> out = (*exe)->execute(args, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0]->dims(), (std::vector<int64_t>{3, 2}));
  Buffer back = p.to_host(*(*out)[0]).value();
  EXPECT_EQ(std::vector<int32_t>(back.data<int32_t>(), back.data<int32_t>() + 6), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(p.to_host(*(*out)[1]).value().bitwise_equal(host));
  // Read back from its serialised form, as the compilation cache does, it runs the same.
  absl::StatusOr<std::shared_ptr<const Executable>> stored = p.deserialize((*exe)->serialize().value());
  ASSERT_TRUE(stored.ok()) << stored.status();
  out = (*stored)->execute(args, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(p.to_host(*(*out)[1]).value().bitwise_equal(host));

  // Arguments are checked before anything runs.
  std::shared_ptr<const DeviceBuffer> wrong = p.from_host(Buffer::zeros(DType::kFloat32, {2, 3}), 0).value();
  const DeviceBuffer* wrong_args[] = {wrong.get()};
  EXPECT_THAT(std::string((*exe)->execute(wrong_args, nullptr).status().message()),
              HasSubstr("argument 0: expected i32[2,3], found f32[2,3] on cuda"));

  ir::ProgramBuilder e("exp");
  const ir::ValueId y = e.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({4})});
  const ir::Program with_kernel = std::move(e).build({e.unary(ir::OpKind::kExp, y)});
  exe = p.compile(with_kernel);
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::shared_ptr<const DeviceBuffer> four = p.from_host(Buffer::zeros(DType::kFloat32, {4}), 0).value();
  const DeviceBuffer* four_args[] = {four.get()};
  absl::Status launched = (*exe)->execute(four_args, nullptr).status();
  EXPECT_THAT(std::string(launched.message()),
              HasSubstr("[GPU 0] launching mcx_0 of @exp: CUDA_ERROR_NOT_SUPPORTED (the fake driver runs no kernels)"));
  EXPECT_EQ(p.kernel_stats().compiled, 1);
}

// cuBLASLt brings its own CUDA runtime, which looks for the real driver: with the stand-in, a product fails
// cleanly, named, instead of crashing or hanging.
// The stand-in cuBLASLt (found next to the stand-in driver) computes the product; the workspace fits the
// allocator's small limit.
TEST(FakeDriver, AProductRunsThroughCublasLt) {
  Platform& p = cuda_platform();
  ir::ProgramBuilder b("dot");
  const ir::ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({4, 3})});
  const ir::ValueId y = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({3, 2})});
  const ir::ValueId d = b.emit_or_throw(ir::OpKind::kDotGeneral, {x, y},
                                        {{"lhs_batch", std::vector<int64_t>{}}, {"lhs_contracting", std::vector<int64_t>{1}},
                                         {"rhs_batch", std::vector<int64_t>{}}, {"rhs_contracting", std::vector<int64_t>{0}}});
  absl::StatusOr<std::shared_ptr<const Executable>> exe = p.compile(std::move(b).build({d}));
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::shared_ptr<const DeviceBuffer> a =
      p.from_host(Buffer::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3}), 0).value();
  std::shared_ptr<const DeviceBuffer> c = p.from_host(Buffer::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}), 0).value();
  const DeviceBuffer* args[] = {a.get(), c.get()};
  absl::StatusOr<std::vector<std::shared_ptr<const DeviceBuffer>>> out = (*exe)->execute(args, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  const Buffer host = p.to_host(*(*out)[0]).value();
  EXPECT_TRUE(host.bitwise_equal(Buffer::from_vector<float>({4, 5, 10, 11, 16, 17, 22, 23}, {4, 2}))) << host.to_string();
}

}  // namespace
}  // namespace mcx::cuda
