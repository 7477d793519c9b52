// Loading NCCL at run time: where the toolkit (or MCX_CUDA_LIBRARY_PATH, or the dynamic linker) has libnccl.so.2
// every entry point resolves and its version is one with non-blocking communicators; where it has none the
// backend says "no NCCL" and why. Results map onto codes naming the call (no GPU needed for either).
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/nccl_api.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Nccl, LoadsWithEveryEntryPointOrSaysWhyNot) {
  absl::StatusOr<const NcclApi*> api = nccl();
  if (!api.ok()) {
    EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition) << api.status();
    EXPECT_THAT(std::string(api.status().message()), StartsWith("no NCCL: "));
    return;
  }
  const NcclApi& n = **api;
  EXPECT_GE(n.version, 21400) << n.library;
  EXPECT_NE(n.ncclCommInitRankConfig, nullptr);
  EXPECT_NE(n.ncclCommGetAsyncError, nullptr);
  EXPECT_NE(n.ncclCommAbort, nullptr);
  EXPECT_THAT(nccl_version_string(n.version), testing::MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
  EXPECT_EQ(nccl().value(), &n);  // loaded once
  std::printf("[nccl] %s from %s\n", nccl_version_string(n.version).c_str(), n.library.c_str());
}

TEST(Nccl, ResultsMapOntoCodesNamingTheCall) {
  EXPECT_EQ(nccl_version_string(22807), "2.28.7");
  absl::StatusOr<const NcclApi*> api = nccl();
  // The mapping words results through the library's own strings: without it there is nothing more to check (the
  // test above checks the error that says why).
  if (!api.ok()) GTEST_SKIP() << api.status();
  const NcclApi& n = **api;
  EXPECT_TRUE(nccl_status(n, ncclSuccess, "ncclAllReduce").ok());
  EXPECT_TRUE(nccl_status(n, ncclInProgress, "ncclAllReduce").ok());  // a non-blocking call under way
  const absl::Status remote = nccl_status(n, ncclRemoteError, "ncclAllReduce");
  EXPECT_EQ(remote.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(remote.message()), HasSubstr("[nccl] ncclAllReduce: "));
  EXPECT_EQ(nccl_status(n, ncclInvalidUsage, "ncclCommInitRankConfig").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace mcx::cuda
