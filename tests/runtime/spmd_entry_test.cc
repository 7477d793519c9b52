// The persistent cache's entry for a partitioned program (runtime/spmd_entry.h): it round-trips, its device
// assignment names mesh, axes and specs (no device ids), and damaged bytes are errors naming the offset.
#include "mcx/runtime/spmd_entry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cpu/cpu_platform.h"
#include "mcx/core/error.h"
#include "mcx/platform/platform_registry.h"
#include "tests/support/compiled_programs.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

const Platform& cpu_platform() {
  throw_if_error(cpu::register_cpu_platform());
  return *value_or_throw(find_platform("cpu"));
}

SpmdEntry sample_entry() {
  SpmdEntry e;
  e.out_specs = {P("data", None), P(axes("x", "y")), P(), PartitionSpec({DimSpec{{}, true}})};
  e.stats.all_reduces = 3;
  e.stats.all_gathers = 1;
  e.stats.fallback_gathers = 2;
  e.stats.notes = {"[partition] reshape %7: gathered", "second note"};
  e.fingerprint = 0x0123456789abcdefULL;
  e.executable = value_or_throw(cpu_platform().compile(test::mlp_softmax_program()));
  return e;
}

TEST(SpmdEntry, RoundTrips) {
  const SpmdEntry e = sample_entry();
  const std::string bytes = value_or_throw(encode_spmd_entry(e));
  const SpmdEntry back = value_or_throw(decode_spmd_entry(bytes, cpu_platform()));
  EXPECT_EQ(back.out_specs, e.out_specs);
  EXPECT_EQ(back.stats.all_reduces, 3);
  EXPECT_EQ(back.stats.all_gathers, 1);
  EXPECT_EQ(back.stats.fallback_gathers, 2);
  EXPECT_EQ(back.stats.notes, e.stats.notes);
  EXPECT_EQ(back.fingerprint, e.fingerprint);
  EXPECT_EQ(value_or_throw(back.executable->serialize()), value_or_throw(e.executable->serialize()));
}

TEST(SpmdEntry, DeviceAssignmentNamesMeshAxesAndSpecs) {
  const MeshAxes axes{{"data", "model"}, {4, 2}};
  EXPECT_EQ(spmd_device_assignment(axes, {P("data", None), P()}, {}),
            "mesh {data: 4, model: 2}; in P('data', None), P(); out auto");
  EXPECT_EQ(spmd_device_assignment(axes, {P()}, {P("model"), std::nullopt}),
            "mesh {data: 4, model: 2}; in P(); out P('model',), auto");
}

TEST(SpmdEntry, TruncatedOrForeignBytesAreErrors) {
  const std::string bytes = value_or_throw(encode_spmd_entry(sample_entry()));
  for (size_t n = 0; n < bytes.size(); n += 7) {
    auto r = decode_spmd_entry(std::string_view(bytes).substr(0, n), cpu_platform());
    ASSERT_FALSE(r.ok()) << "truncated to " << n;
  }
  EXPECT_FALSE(decode_spmd_entry(bytes + "x", cpu_platform()).ok());
  auto r = decode_spmd_entry("MCXCPUEX and more", cpu_platform());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("MCXSPMD1"));
}

}  // namespace
}  // namespace mcx
