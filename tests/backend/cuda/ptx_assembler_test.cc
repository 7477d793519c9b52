// PTX to cubin through nvJitLink, with no GPU: a hand-written kernel assembles for Hopper and Ampere with the
// assembler's report; PTX it rejects comes back with the assembler's log.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/ptx_assembler.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;

constexpr const char* kAddOne = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry add_one(.param .u64 p, .param .u32 n) {
  .reg .pred %done;
  .reg .b32 %i, %n;
  .reg .b64 %a, %off;
  .reg .f32 %x;
  ld.param.u64 %a, [p];
  ld.param.u32 %n, [n];
  mov.u32 %i, %tid.x;
  setp.ge.u32 %done, %i, %n;
  @%done ret;
  cvta.to.global.u64 %a, %a;
  mul.wide.u32 %off, %i, 4;
  add.u64 %a, %a, %off;
  ld.global.f32 %x, [%a];
  add.f32 %x, %x, 0f3F800000;
  st.global.f32 [%a], %x;
  ret;
}
)";

TEST(PtxAssembler, AssemblesForHopperAndAmpere) {
  for (int arch : {90, 80}) {
    SCOPED_TRACE(arch);
    absl::StatusOr<AssembledKernel> k = assemble_ptx(kAddOne, arch);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(k->cubin.substr(0, 4), "\x7f" "ELF");
    EXPECT_THAT(k->info, HasSubstr("add_one"));
    EXPECT_THAT(k->info, HasSubstr("registers"));
  }
  absl::StatusOr<std::string> v = ptx_assembler_version();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(*v, ::testing::StartsWith("13."));
}

TEST(PtxAssembler, RejectedPtxComesBackWithTheLog) {
  absl::StatusOr<AssembledKernel> k = assemble_ptx(".version 8.0\n.target sm_90\n.address_size 64\nthis is not ptx\n", 90);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("PTX rejected by nvJitLink for sm_90"));
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("syntax error"));
}

}  // namespace
}  // namespace mcx::cuda
