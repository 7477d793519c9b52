// Fused element-wise chains: against the reference, and bitwise against the same program run one op at a
// time (each op its own executable), with transposed / broadcast / sliced inputs, multiple outputs,
// in-place reuse of dying temporaries and groups split by reductions.
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using Ints = std::vector<int64_t>;

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

void expect_fused_equals_unfused_and_reference(const ir::Program& p, const std::vector<Buffer>& args,
                                               double rtol = -1, double atol = -1) {
  expect_matches_reference(p, args, rtol, atol);
  std::vector<Buffer> fused = run_cpu(p, args);
  std::vector<Buffer> unfused = run_unfused(p, args);
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_TRUE(fused[i].bitwise_equal(unfused[i])) << "result " << i << ": fused " << fused[i].to_string(8)
                                                    << " vs unfused " << unfused[i].to_string(8);
  }
}

TEST(Fusion, ChainWithTransposedAndBroadcastInputs) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_short_name(t)));
    ir::ProgramBuilder b("chain");
    auto a = b.add_parameter(av(t, {37, 129}));   // used transposed
    auto row = b.add_parameter(av(t, {37}));      // broadcast along rows of the result
    auto s = b.add_parameter(av(t, {}));          // scalar broadcast
    auto at = b.transpose(a, {1, 0});             // [129, 37]
    auto rb = b.broadcast_in_dim(row, concrete_shape({129, 37}), {1});
    auto sb = b.broadcast_in_dim(s, concrete_shape({129, 37}), {});
    auto e = b.unary(OpKind::kExp, at);
    auto m = b.binary(OpKind::kMul, e, rb);
    auto y = b.binary(OpKind::kAdd, m, sb);
    auto z = b.unary(OpKind::kTanh, y);
    auto c = b.convert(z, DType::kFloat64);
    ir::Program p = std::move(b).build({c, m});
    expect_fused_equals_unfused_and_reference(
        p, {test::random_buffer(t, {37, 129}, 1, -2, 2), test::random_buffer(t, {37}, 2), test::random_buffer(t, {}, 3)},
        t == DType::kFloat32 ? 1e-5 : -1, t == DType::kFloat32 ? 1e-5 : -1);
  }
}

TEST(Fusion, IntegerAndBoolChainWithSlicedAndReversedInputs) {
  ir::ProgramBuilder b("ints");
  auto x = b.add_parameter(av(DType::kInt32, {20, 30}));
  auto sl = b.emit_or_throw(OpKind::kSlice, {x}, {{"start", concrete_shape({1, 3})}, {"limit", concrete_shape({19, 30})},
                                                  {"strides", Ints{2, 3}}});  // [9, 9]
  auto rv = b.emit_or_throw(OpKind::kReverse, {sl}, {{"dimensions", Ints{0, 1}}});
  auto sum = b.binary(OpKind::kAdd, sl, rv);
  auto prod = b.binary(OpKind::kMul, sum, sl);
  auto gt = b.emit_or_throw(OpKind::kGt, {prod, sum});
  auto sel = b.select(gt, prod, sum);
  auto f = b.convert(sel, DType::kFloat32);
  ir::Program p = std::move(b).build({f, gt});
  expect_fused_equals_unfused_and_reference(p, {test::random_buffer(DType::kInt32, {20, 30}, 4, -50, 50)});
}

TEST(Fusion, InPlaceReuseOfDyingTemporaries) {
  // t1 is materialised by the reduction's consumer chain and dies in the second group: its storage is
  // reused for the output. Checks the values (and that reuse never touches an argument).
  ir::ProgramBuilder b("inplace");
  auto x = b.add_parameter(av(DType::kFloat32, {64, 100}));
  auto t1 = b.unary(OpKind::kExp, x);
  auto r = b.reduce_sum(t1, {1});
  auto rb = b.broadcast_in_dim(r, concrete_shape({64, 100}), {0});
  auto y = b.binary(OpKind::kDiv, t1, rb);
  auto y2 = b.binary(OpKind::kMul, y, y);
  ir::Program p = std::move(b).build({y2});
  Buffer arg = test::random_buffer(DType::kFloat32, {64, 100}, 5);
  Buffer before = arg.copy();
  expect_fused_equals_unfused_and_reference(p, {arg}, 1e-5, 1e-7);
  EXPECT_TRUE(arg.bitwise_equal(before)) << "an argument buffer was modified";
}

TEST(Fusion, SameTemporaryThroughTwoViews) {
  // t is consumed both directly and transposed by one group: no in-place reuse allowed there.
  ir::ProgramBuilder b("twoviews");
  auto x = b.add_parameter(av(DType::kFloat32, {33, 33}));
  auto t = b.emit_or_throw(OpKind::kCumsum, {x}, {{"dimension", int64_t{1}}, {"reverse", int64_t{0}}});
  auto tt = b.transpose(t, {1, 0});
  auto y = b.binary(OpKind::kSub, t, tt);
  ir::Program p = std::move(b).build({y});
  expect_fused_equals_unfused_and_reference(p, {test::random_buffer(DType::kFloat32, {33, 33}, 6)}, 1e-5, 1e-5);
}

TEST(Fusion, SoftmaxSplitsIntoGroupsAroundReductions) {
  ir::ProgramBuilder b("softmax");
  auto x = b.add_parameter(av(DType::kFloat32, {50, 1030}));
  auto mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{1}}});
  auto mb = b.broadcast_in_dim(mx, concrete_shape({50, 1030}), {0});
  auto e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, x, mb));
  auto s = b.reduce_sum(e, {1});
  auto sb = b.broadcast_in_dim(s, concrete_shape({50, 1030}), {0});
  auto y = b.binary(OpKind::kDiv, e, sb);
  ir::Program p = std::move(b).build({y});
  expect_fused_equals_unfused_and_reference(p, {test::random_buffer(DType::kFloat32, {50, 1030}, 7, -5, 5)}, 1e-5, 1e-8);
}

TEST(Fusion, ResultsAliasingParametersAndConstants) {
  ir::ProgramBuilder b("alias");
  auto x = b.add_parameter(av(DType::kFloat32, {3}));
  auto c = b.constant(Buffer::from_vector<float>({1, 2, 3}, {3}));
  auto y = b.binary(OpKind::kAdd, x, c);
  auto z = b.binary(OpKind::kMul, y, c);
  ir::Program p = std::move(b).build({x, c, z, y});
  expect_fused_equals_unfused_and_reference(p, {Buffer::from_vector<float>({1, 1, 1}, {3})});
  // Run twice: the constant must be unchanged by the first run.
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok());
  Buffer arg = Buffer::from_vector<float>({1, 1, 1}, {3});
  auto r1 = (*exe)->execute({&arg, 1});
  auto r2 = (*exe)->execute({&arg, 1});
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_TRUE((*r1)[2].bitwise_equal((*r2)[2]));
  EXPECT_EQ((*r2)[2].data<float>()[2], 12.0f);
}

TEST(Fusion, BroadcastScalarsIntoSmallAndMultiTileShapes) {
  // Uniform (all-stride-0) leaves are filled once per chunk; shorter than a tile, exactly a tile, longer.
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kInt32}) {
    for (const Ints& dims : std::vector<Ints>{{5}, {3, 5}, {1024}, {3, 1000}, {2, 1, 2049}}) {
      SCOPED_TRACE(std::string(dtype_short_name(t)) + dims_str(dims));
      ir::ProgramBuilder b("bscalar");
      auto x = b.add_parameter(av(t, dims));
      auto s = b.add_parameter(av(t, {}));
      auto one = b.add_parameter(av(t, {1, 1}));
      auto sb = b.broadcast_in_dim(s, concrete_shape(dims), {});
      auto ob = b.broadcast_in_dim(b.reshape(one, concrete_shape({})), concrete_shape(dims), {});
      auto y = b.binary(OpKind::kMul, b.binary(OpKind::kAdd, x, sb), ob);
      ir::Program p = std::move(b).build({y});
      expect_fused_equals_unfused_and_reference(
          p, {test::random_buffer(t, dims, 11, -9, 9), test::random_buffer(t, {}, 12, -9, 9), test::random_buffer(t, {1, 1}, 13, -9, 9)});
    }
  }
}

}  // namespace
}  // namespace mcx::cpu::testing
