// Loading the CUDA driver at run time: on a machine without one (CI, the build machines) the backend says
// "no CUDA driver" and why, whatever file stands in for the driver; with one (label gpu), the driver is at
// least the CUDA version mcx was built with and sees a device.
#include <cstdlib>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/driver_api.h"
#include "mcx/backend/cuda/dynamic_library.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The toolkit's stub driver is on build machines, not on a GPU machine running the carried tests.
#define SKIP_WITHOUT_STUB_DRIVER()                                   \
  if (!std::filesystem::exists(MCX_TEST_CUDA_STUB_DRIVER))           \
  GTEST_SKIP() << "no CUDA toolkit stub driver here (" MCX_TEST_CUDA_STUB_DRIVER ")"

TEST(CudaDriver, LoadsOrSaysWhyNot) {
  absl::StatusOr<const DriverApi*> d = cuda_driver();
  if (!d.ok()) {
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition) << d.status();
    EXPECT_THAT(std::string(d.status().message()), StartsWith("no CUDA driver: "));
    // The same answer every time (loaded once).
    EXPECT_EQ(cuda_driver().status(), d.status());
    return;
  }
  EXPECT_GE((*d)->version, kBuiltCudaVersion);
  EXPECT_NE((*d)->cuLaunchKernel, nullptr);
  EXPECT_NE((*d)->cuMemAlloc, nullptr);
  EXPECT_EQ(cuda_driver().value(), *d);
}

TEST(CudaDriver, AMissingLibraryIsNamed) {
  absl::StatusOr<std::unique_ptr<DriverApi>> d = load_cuda_driver("libcuda_does_not_exist.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("no CUDA driver: cannot load libcuda_does_not_exist.so.1"));
}

TEST(CudaDriver, ALibraryThatIsNotADriverIsRefused) {
  absl::StatusOr<std::unique_ptr<DriverApi>> d = load_cuda_driver("libz.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("has no symbol cuGetProcAddress_v2: not a CUDA 13 driver"));
}

// The toolkit's stub libcuda.so (for linking) has every symbol and fails every call: a common mistake when
// LD_LIBRARY_PATH names the stubs folder.
TEST(CudaDriver, TheToolkitsStubLibraryIsNamedAsSuch) {
  SKIP_WITHOUT_STUB_DRIVER();
  absl::StatusOr<std::unique_ptr<DriverApi>> d = load_cuda_driver(MCX_TEST_CUDA_STUB_DRIVER);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("is the CUDA toolkit's stub library"));
}

TEST(CudaDriver, ResultsBecomeStatusesNamingTheCall) {
  DriverApi none;  // no functions: the result is named by its number
  EXPECT_TRUE(driver_status(none, CUDA_SUCCESS, "x").ok());
  absl::Status oom = driver_status(none, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(1 GiB)");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(oom.message(), "cuMemAlloc(1 GiB): CUresult 2");
  EXPECT_EQ(driver_status(none, CUDA_ERROR_LAUNCH_FAILED, "cuLaunchKernel").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12080), "12.8");
}

TEST(DynamicLibrary, SearchesMcxCudaLibraryPathAndNamesWhereItLooked) {
  SKIP_WITHOUT_STUB_DRIVER();
  const std::string names[] = {"libmcx_no_such_library.so"};
  setenv("MCX_CUDA_LIBRARY_PATH", "/nonexistent/a:/nonexistent/b", 1);
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::open(names);
  unsetenv("MCX_CUDA_LIBRARY_PATH");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(lib.status().message()), HasSubstr("/nonexistent/a, /nonexistent/b"));
  EXPECT_THAT(std::string(lib.status().message()), HasSubstr("libmcx_no_such_library.so"));

  // A folder of MCX_CUDA_LIBRARY_PATH is where a library outside the linker's path is found.
  const std::string stub_dir = std::string(MCX_TEST_CUDA_STUB_DRIVER).substr(0, std::string(MCX_TEST_CUDA_STUB_DRIVER).rfind('/'));
  setenv("MCX_CUDA_LIBRARY_PATH", ("/nonexistent:" + stub_dir).c_str(), 1);
  const std::string stub[] = {"libcuda.so"};
  absl::StatusOr<DynamicLibrary> found = DynamicLibrary::open(stub);
  unsetenv("MCX_CUDA_LIBRARY_PATH");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path(), stub_dir + "/libcuda.so");
  EXPECT_TRUE(found->symbol("cuInit").ok());
  EXPECT_THAT(std::string(found->symbol("no_such_symbol").status().message()), HasSubstr("has no symbol no_such_symbol"));
}

}  // namespace
}  // namespace mcx::cuda
