// The CUDA platform in the registry, on any machine: registered under its name below the CPU's priority, and
// where no driver or GPU is present it says so (usable() and MCX_PLATFORMS=cuda), with no device and nothing
// compiled. On a machine with a GPU the gpu label's tests take over.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/cuda_platform.h"
#include "mcx/ir/builder.h"
#include "mcx/platform/platform_registry.h"
#include "tests/support/cuda/registered_platforms.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;

Platform& cuda_platform() { return test::registered_platform("cuda"); }

TEST(CudaPlatform, IsRegisteredBelowTheCpu) {
  Platform& p = cuda_platform();
  EXPECT_EQ(p.name(), "cuda");
  const std::vector<std::string> names = registered_platforms();
  const auto cpu = std::find(names.begin(), names.end(), "cpu");
  const auto cuda = std::find(names.begin(), names.end(), "cuda");
  ASSERT_NE(cuda, names.end());
  EXPECT_LT(cpu, cuda);  // by descending priority: the CPU stays the default
  EXPECT_EQ(register_cuda_platform().code(), absl::StatusCode::kFailedPrecondition);  // in use already
}

TEST(CudaPlatform, WithoutADriverItSaysSoEverywhere) {
  Platform& p = cuda_platform();
  const absl::Status usable = p.usable();
  if (usable.ok()) GTEST_SKIP() << "a CUDA driver and GPU are present: the gpu label tests the platform";
  EXPECT_EQ(usable.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(usable.message()), ::testing::StartsWith("no CUDA driver: "));
  EXPECT_EQ(p.device_count(), 0);
  absl::StatusOr<std::vector<Platform*>> selected = select_platforms("cuda");
  ASSERT_FALSE(selected.ok());
  EXPECT_THAT(std::string(selected.status().message()), HasSubstr("MCX_PLATFORMS='cuda': no CUDA driver"));
  // Not selected by default when unusable.
  absl::StatusOr<std::vector<Platform*>> all = select_platforms("");
  ASSERT_TRUE(all.ok()) << all.status();
  for (Platform* q : *all) EXPECT_NE(q->name(), "cuda");
  ir::ProgramBuilder b("x");
  const ir::ValueId x = b.add_parameter(AbstractValue{DType::kFloat32, concrete_shape({2})});
  const ir::Program program = std::move(b).build({b.unary(ir::OpKind::kExp, x)});
  EXPECT_EQ(p.compile(program).status(), usable);
  EXPECT_EQ(p.from_host(Buffer::zeros(DType::kFloat32, {2}), 0).status(), usable);
  // The compile key still names every component (a cache of another machine's GPU code never matches).
  std::vector<std::string> names;
  for (const KeyComponent& c : p.compile_key()) names.push_back(c.name);
  EXPECT_THAT(names, ::testing::ElementsAre("arch", "cuda_driver", "cuda_toolkit", "ptx_assembler", "llvm_version",
                                            "generator"));
}

}  // namespace
}  // namespace mcx::cuda
