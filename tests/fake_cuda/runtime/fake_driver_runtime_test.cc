// The CUDA platform through the runtime and the public API, against the stand-in driver (no kernels; see
// fake_driver_platform_test.cc), with MCX_PLATFORMS=cpu,cuda: the GPU is a device of its platform beside the CPU
// default, arrays move to it and back, the transfer guard counts those moves as host-to-device and
// device-to-host transfers, and an op dispatched to the GPU reaches its kernel launch (which the stand-in
// refuses, named in the error).
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

TEST(FakeDriverRuntime, TheGpuIsADeviceBesideTheCpuDefault) {
  EXPECT_EQ(default_platform(), "cpu");
  const std::vector<Device>& gpus = local_devices("cuda");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].platform, "cuda");
  EXPECT_EQ(gpus[0].local_id, 0);
  EXPECT_EQ(gpus[0].to_string(), "cuda:" + std::to_string(gpus[0].global_id));
  EXPECT_EQ(gpus[0].kind, "mcx fake GPU");  // the driver's name for it, as JAX's device_kind
  EXPECT_EQ(local_devices("cpu")[0].kind, "cpu");
}

TEST(FakeDriverRuntime, ArraysMoveToTheGpuAndBackAsGuardedTransfers) {
  const Device& gpu = local_devices("cuda")[0];
  const Array x(Buffer::from_vector<float>({1.5f, -2.0f, 3.25f}, {3}));
  const Array on_gpu = device_put(x, gpu);
  EXPECT_TRUE(on_gpu.to_host().bitwise_equal(x.to_host()));
  {
    set_transfer_guard(TransferDirection::kHostToDevice, TransferGuardLevel::kDisallowExplicit);
    try {
      (void)device_put(x, gpu).to_host();
      ADD_FAILURE() << "a disallowed host-to-device transfer to the GPU went through";
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr("host-to-device transfer of f32[3]"));
    }
    set_transfer_guard(TransferDirection::kHostToDevice, TransferGuardLevel::kAllow);
  }
  set_transfer_guard(TransferDirection::kDeviceToHost, TransferGuardLevel::kDisallowExplicit);
  EXPECT_THROW((void)on_gpu.to_host(), Error);
  set_transfer_guard(TransferDirection::kDeviceToHost, TransferGuardLevel::kAllow);
}

TEST(FakeDriverRuntime, AnOpOnAGpuArrayRunsOnTheGpu) {
  const Device& gpu = local_devices("cuda")[0];
  const Array on_gpu = device_put(Array(Buffer::from_vector<float>({0.0f, 1.0f}, {2})), gpu);
  try {
    (void)exp(on_gpu).to_host();
    ADD_FAILURE() << "the stand-in driver runs no kernels; exp should have failed at its launch";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("CUDA_ERROR_NOT_SUPPORTED (the fake driver runs no kernels)"));
  }
}

}  // namespace
}  // namespace mcx
