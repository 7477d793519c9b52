// The partitioning rules of conv_general_dilated and reduce_window: swept over the test meshes and many
// specs per argument (each partition's results against its box of the unpartitioned reference), a
// batch-sharded CNN block that needs no communication, and feature-sharded convolutions that all-reduce.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/spmd/partitioner_harness.h"
#include "tests/support/window_cases.h"

namespace mcx::spmd {
namespace {

using ir::OpKind;
using ir::ProgramBuilder;
using ir::ValueId;
using ::testing::HasSubstr;
using testing::check_partition;
using testing::mesh_of;
using testing::sweep;
using Ints = std::vector<int64_t>;

constexpr int kSamples = 6;
const testing::CheckOptions kExact{};
const testing::CheckOptions kFloat{1e-5, 1e-5};

AbstractValue ty(DType dt, Ints dims) { return AbstractValue{dt, concrete_shape(dims)}; }
Buffer floats(Ints dims, uint64_t seed) { return test::random_buffer(DType::kFloat32, std::move(dims), seed, -1, 1); }

test::ConvCase nhwc_case(Ints lhs, Ints rhs, Ints strides, Ints low, Ints high, int64_t groups) {
  return {"nhwc", lhs, rhs, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2}, strides, {1, 1}, {1, 1}, low, high, groups};
}

ValueId conv(ProgramBuilder& b, ValueId x, ValueId w, const test::ConvCase& c) {
  return b.emit_or_throw(OpKind::kConvGeneralDilated, {x, w}, c.attrs());
}

TEST(PartitionerWindowTest, ConvolutionsUnderEverySpec) {
  for (const test::ConvCase& c : {nhwc_case({4, 6, 4, 4}, {3, 3, 4, 8}, {1, 1}, {1, 1}, {1, 1}, 1),
                                  nhwc_case({4, 4, 6, 4}, {3, 2, 2, 4}, {2, 1}, {0, 1}, {1, 0}, 2)}) {
    ProgramBuilder b("conv");
    ValueId x = b.add_parameter(ty(DType::kFloat32, c.lhs));
    ValueId w = b.add_parameter(ty(DType::kFloat32, c.rhs));
    ir::Program g = std::move(b).build({conv(b, x, w, c)});
    sweep(g, {floats(c.lhs, 1), floats(c.rhs, 2)}, kSamples, kFloat);
  }
}

TEST(PartitionerWindowTest, ReduceWindowsUnderEverySpec) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    test::WindowCase c{"pool", {4, 6, 4, 8}, {1, 3, 2, 1}, {1, 1, 2, 1}, {0, 1, 0, 0}, {0, 1, 0, 0}};
    ProgramBuilder b("pool");
    ValueId x = b.add_parameter(ty(DType::kInt32, c.dims));
    ir::Program g = std::move(b).build({b.emit_or_throw(OpKind::kReduceWindow, {x}, test::window_attrs(c, op))});
    sweep(g, {test::random_buffer(DType::kInt32, c.dims, 3, -50, 50)}, kSamples, kExact);
  }
}

// conv -> relu -> 2x2 max pool with the batch sharded over 4 devices: every op runs on its local batch.
TEST(PartitionerWindowTest, BatchShardedCnnBlockNeedsNoCommunication) {
  const test::ConvCase c = nhwc_case({8, 6, 6, 3}, {3, 3, 3, 4}, {1, 1}, {1, 1}, {1, 1}, 1);
  const test::WindowCase pool{"pool", {8, 6, 6, 4}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  ProgramBuilder b("cnn_block");
  ValueId x = b.add_parameter(ty(DType::kFloat32, c.lhs));
  ValueId w = b.add_parameter(ty(DType::kFloat32, c.rhs));
  ValueId y = conv(b, x, w, c);
  ValueId relu = b.binary(OpKind::kMax, y, b.full_like(y, 0.0));
  ValueId p = b.emit_or_throw(OpKind::kReduceWindow, {relu}, test::window_attrs(pool, ReduceOp::kMax));
  ir::Program g = std::move(b).build({p});
  PartitionedProgram pp = check_partition(g, mesh_of({"data"}, {4}), {P("data"), P()}, {P("data")},
                                          {floats(c.lhs, 4), floats(c.rhs, 5)}, kFloat);
  EXPECT_EQ(pp.stats.all_reduces + pp.stats.all_gathers + pp.stats.all_to_alls, 0) << ir::print_program(pp.per_device);
  EXPECT_EQ(pp.stats.fallback_gathers, 0);
  for (const ir::Instr& in : pp.per_device.instrs) EXPECT_FALSE(ir::is_collective(in.kind)) << ir::op_name(in.kind);
}

// lhs features and rhs input features sharded alike: partial sums and one all_reduce; output features
// sharded through the rhs stay sharded.
TEST(PartitionerWindowTest, FeatureShardsContractOrStaySharded) {
  const test::ConvCase c = nhwc_case({2, 5, 5, 8}, {3, 3, 8, 4}, {1, 1}, {1, 1}, {1, 1}, 1);
  ProgramBuilder b("features");
  ValueId x = b.add_parameter(ty(DType::kFloat32, c.lhs));
  ValueId w = b.add_parameter(ty(DType::kFloat32, c.rhs));
  ir::Program g = std::move(b).build({conv(b, x, w, c)});
  const std::vector<Buffer> args = {floats(c.lhs, 6), floats(c.rhs, 7)};
  PartitionedProgram contracted = check_partition(g, mesh_of({"k"}, {4}), {P(None, None, None, "k"), P(None, None, "k")},
                                                  {}, args, kFloat);
  EXPECT_EQ(contracted.stats.all_reduces, 1);
  EXPECT_EQ(contracted.stats.all_gathers, 0);
  PartitionedProgram out_sharded =
      check_partition(g, mesh_of({"k"}, {4}), {P(), P(None, None, None, "k")}, {}, args, kFloat);
  EXPECT_EQ(out_sharded.out_specs[0], P(None, None, None, "k"));
  EXPECT_EQ(out_sharded.stats.all_reduces + out_sharded.stats.all_gathers, 0);
  // A sharded spatial dim is gathered first (windows would need halos), with a note.
  PartitionedProgram spatial = check_partition(g, mesh_of({"k"}, {5}), {P(None, "k"), P()}, {}, args, kFloat);
  EXPECT_EQ(spatial.stats.fallback_gathers, 1);
  ASSERT_FALSE(spatial.stats.notes.empty());
  EXPECT_THAT(spatial.stats.notes[0], HasSubstr("conv_general_dilated %2: operand 0 dim 1 {k} gathered"));
}

}  // namespace
}  // namespace mcx::spmd
