// The partitioner on a whole training step: a 2-layer MLP's loss and its gradients
// (ir::value_and_grad_program) partitioned data-parallel (batch sharded, parameters replicated),
// model-parallel (hidden dimension sharded) and both at once; the loss and every gradient must match
// the unpartitioned program. Prints one stats line per case.
#include <gtest/gtest.h>

#include <iostream>

#include "mcx/ir/autodiff.h"
#include "tests/spmd/partitioner_harness.h"

namespace mcx::spmd {
namespace {

using ir::OpKind;
using ir::ProgramBuilder;
using ir::ValueId;
using testing::check_partition;
using testing::mesh_of;

constexpr int64_t kBatch = 16, kIn = 12, kHidden = 8, kOut = 4;

AbstractValue ty(std::vector<int64_t> dims) { return AbstractValue{DType::kFloat32, concrete_shape(dims)}; }

// loss(x, y, w1, b1, w2, b2) = sum((tanh(x w1 + b1) w2 + b2 - y)^2) / batch
ir::Program mlp_loss() {
  ProgramBuilder b("mlp_loss");
  ValueId x = b.add_parameter(ty({kBatch, kIn}));
  ValueId y = b.add_parameter(ty({kBatch, kOut}));
  ValueId w1 = b.add_parameter(ty({kIn, kHidden}));
  ValueId b1 = b.add_parameter(ty({kHidden}));
  ValueId w2 = b.add_parameter(ty({kHidden, kOut}));
  ValueId b2 = b.add_parameter(ty({kOut}));
  using V = std::vector<int64_t>;
  auto matmul = [&](ValueId l, ValueId r) {
    return b.emit_or_throw(OpKind::kDotGeneral, {l, r},
                           {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}},
                            {"rhs_contracting", V{0}}});
  };
  ValueId h = b.unary(OpKind::kTanh, b.binary(OpKind::kAdd, matmul(x, w1),
                                              b.broadcast_in_dim(b1, concrete_shape({kBatch, kHidden}), {1})));
  ValueId out = b.binary(OpKind::kAdd, matmul(h, w2), b.broadcast_in_dim(b2, concrete_shape({kBatch, kOut}), {1}));
  ValueId d = b.binary(OpKind::kSub, out, y);
  ValueId sq = b.reduce_sum(b.binary(OpKind::kMul, d, d), {0, 1});
  ValueId loss = b.binary(OpKind::kDiv, sq, b.scalar_constant(DType::kFloat32, static_cast<double>(kBatch)));
  return std::move(b).build({loss});
}

struct MlpCase {
  std::string name;
  MeshAxes mesh;
  std::vector<PartitionSpec> in_specs;  // x, y, w1, b1, w2, b2
  // Expected communication: none of the parameters' gradients should need an all_gather.
  bool expect_no_gathers;
};

TEST(PartitionerMlpTest, ForwardAndBackward) {
  auto grad = ir::value_and_grad_program(mlp_loss(), {2, 3, 4, 5});
  ASSERT_TRUE(grad.ok()) << grad.status();
  std::vector<Buffer> args;
  uint64_t seed = 100;
  for (const auto& p : grad->params) args.push_back(test::random_buffer(p.dtype, testing::dims_of(p), seed++));

  std::vector<MlpCase> cases;
  for (int64_t n : {1, 2, 4, 8}) {
    MeshAxes m = mesh_of({"data"}, {n});
    cases.push_back({"data-parallel", m, {P("data"), P("data"), P(), P(), P(), P()}, true});
  }
  for (int64_t n : {2, 4, 8}) {
    MeshAxes m = mesh_of({"model"}, {n});
    cases.push_back({"model-parallel", m, {P(), P(), P(None, "model"), P("model"), P("model"), P()}, true});
  }
  cases.push_back({"data+model", mesh_of({"data", "model"}, {2, 4}),
                   {P("data"), P("data"), P(None, "model"), P("model"), P("model"), P()}, true});
  cases.push_back({"data+model", mesh_of({"data", "model"}, {4, 2}),
                   {P("data"), P("data"), P(None, "model"), P("model"), P("model"), P()}, true});
  cases.push_back({"data over 2 axes", mesh_of({"x", "y", "z"}, {2, 2, 2}),
                   {P(axes("x", "y")), P(axes("x", "y")), P(None, "z"), P("z"), P("z"), P()}, true});
  cases.push_back({"contracting sharded on one side", mesh_of({"data"}, {3}),
                   {P(), P(), P("data"), P(), P(), P()}, false});

  for (const MlpCase& c : cases) {
    SCOPED_TRACE(c.name + " on " + c.mesh.to_string());  // NOLINT
    // Gradients come back with the sharding of their parameters (as a training step wants them).
    std::vector<std::optional<PartitionSpec>> out{P()};
    for (int p = 2; p < 6; ++p) out.push_back(c.in_specs[p]);
    PartitionedProgram pp = check_partition(*grad, c.mesh, c.in_specs, out, args, {1e-5, 1e-5});
    const PartitionStats& s = pp.stats;
    std::cout << "[mlp] " << c.name << " mesh " << c.mesh.to_string() << ": all_reduces=" << s.all_reduces
              << " all_gathers=" << s.all_gathers << " all_to_alls=" << s.all_to_alls
              << " local_slices=" << s.local_slices << " fallback_gathers=" << s.fallback_gathers
              << " per-device instrs=" << pp.per_device.instrs.size() << std::endl;
    for (const auto& note : s.notes) std::cout << "  " << note << std::endl;
    if (c.expect_no_gathers) {
      EXPECT_EQ(s.all_gathers, 0) << ir::print_program(pp.per_device);
      EXPECT_EQ(s.fallback_gathers, 0);
    }
    if (c.mesh.num_devices() > 1) {
      EXPECT_GT(s.all_reduces, 0);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace mcx::spmd
