// Row-block regions (executable_plan.h, Plan::RowRegion): runs of "reduce over trailing axes -> broadcast back
// -> element-wise" steps executed row block by row block. Every case is checked against the reference
// evaluator and bitwise against the same program run one op at a time (each op its own executable), for
// odd row lengths, empty rows, one row, escaping intermediates, rank-3 shapes, 16-bit floats and thread
// counts 1..7.
#include "mcx/backend/cpu/thread_pool.h"
#include "mcx/ir/builder.h"
#include "tests/backend/backend_test_util.h"

namespace mcx::cpu::testing {
namespace {

using ir::OpKind;
using ir::ValueId;
using Ints = std::vector<int64_t>;

AbstractValue av(DType t, const Ints& dims) { return {t, concrete_shape(dims)}; }

void expect_region_correct(const ir::Program& p, const std::vector<Buffer>& args, double rtol, double atol) {
  expect_matches_reference(p, args, rtol, atol);
  std::vector<Buffer> unfused = run_unfused(p, args);
  ThreadCountGuard guard;
  auto exe = CpuExecutable::compile(p);
  ASSERT_TRUE(exe.ok()) << exe.status();
  for (int threads = 1; threads <= 7; ++threads) {
    set_num_threads(threads);
    auto got = (*exe)->execute(args);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), unfused.size());
    for (size_t i = 0; i < got->size(); ++i) {
      EXPECT_TRUE((*got)[i].bitwise_equal(unfused[i]))
          << p.name << " result " << i << " with " << threads << " threads: " << (*got)[i].to_string(8)
          << " vs unfused " << unfused[i].to_string(8);
    }
  }
}

struct Softmax {
  ValueId mx, mb, e, s, y;
};

// softmax over the last axis as the trace library builds it.
Softmax softmax(ir::ProgramBuilder& b, ValueId x, const Ints& dims) {
  const int64_t last = static_cast<int64_t>(dims.size()) - 1;
  Ints keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  Softmax r;
  r.mx = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{last}}});
  r.mb = b.broadcast_in_dim(r.mx, concrete_shape(dims), keep);
  r.e = b.unary(OpKind::kExp, b.binary(OpKind::kSub, x, r.mb));
  r.s = b.reduce_sum(r.e, {last});
  r.y = b.binary(OpKind::kDiv, r.e, b.broadcast_in_dim(r.s, concrete_shape(dims), keep));
  return r;
}

TEST(RowFusion, SoftmaxOddShapesEmptyAndSingleRows) {
  const std::vector<Ints> shapes = {{300, 1030}, {1, 1030}, {257, 1}, {37, 7}, {0, 5}, {5, 0}, {1, 1},
                                    {4099, 3}};
  for (const Ints& dims : shapes) {
    ir::ProgramBuilder b("softmax" + dims_str(dims));
    auto x = b.add_parameter(av(DType::kFloat32, dims));
    const ValueId y = softmax(b, x, dims).y;
    ir::Program p = std::move(b).build({y});
    expect_region_correct(p, {test::random_buffer(DType::kFloat32, dims, 11, -5, 5)}, 1e-5, 1e-8);
  }
}

TEST(RowFusion, IntermediatesNeededAfterTheRegion) {
  // The row max, its broadcast (a view of a value made inside), exp and the row sums are all results.
  const Ints dims = {129, 333};
  ir::ProgramBuilder b("softmax_escapes");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  Softmax sm = softmax(b, x, dims);
  auto after = b.binary(OpKind::kMul, sm.e, b.unary(OpKind::kNeg, sm.mb));  // consumers after the region
  ir::Program p = std::move(b).build({sm.y, sm.mx, sm.mb, sm.e, sm.s, after});
  expect_region_correct(p, {test::random_buffer(DType::kFloat32, dims, 12, -3, 3)}, 1e-5, 1e-6);
}

TEST(RowFusion, LogSoftmaxCrossEntropyWithBias) {
  // loss = -sum(onehot * (z - max - log(sum(exp(z - max))))), z = x + broadcast(bias): the bias broadcast is a
  // view of an outside value inside the run; the final reduction over rows ends the region.
  const Ints dims = {256, 10};
  ir::ProgramBuilder b("xent");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  auto bias = b.add_parameter(av(DType::kFloat32, {10}));
  auto onehot = b.add_parameter(av(DType::kFloat32, dims));
  auto z = b.binary(OpKind::kAdd, x, b.broadcast_in_dim(bias, concrete_shape(dims), {1}));
  auto mx = b.emit_or_throw(OpKind::kReduceMax, {z}, {{"dimensions", Ints{1}}});
  auto d = b.binary(OpKind::kSub, z, b.broadcast_in_dim(mx, concrete_shape(dims), {0}));
  auto lse = b.unary(OpKind::kLog, b.reduce_sum(b.unary(OpKind::kExp, d), {1}));
  auto logp = b.binary(OpKind::kSub, d, b.broadcast_in_dim(lse, concrete_shape(dims), {0}));
  auto loss = b.unary(OpKind::kNeg, b.reduce_sum(b.binary(OpKind::kMul, onehot, logp), {0, 1}));
  ir::Program p = std::move(b).build({loss, logp});
  Buffer hot = Buffer::zeros(DType::kFloat32, dims);
  for (int64_t r = 0; r < 256; ++r) hot.mutable_data<float>()[r * 10 + (r * 7) % 10] = 1.f;
  expect_region_correct(p, {test::random_buffer(DType::kFloat32, dims, 13, -4, 4),
                            test::random_buffer(DType::kFloat32, {10}, 14), hot}, 1e-5, 1e-5);
}

TEST(RowFusion, ValueOfOneRegionReadByTheNext) {
  // As the trace library builds log_softmax, with reshapes of the row max and of the sum. Those reshapes
  // once ended a region, and the next region read z, made inside the first (regression: z was not kept for
  // it); now they are views inside one region.
  const Ints dims = {6, 3};
  ir::ProgramBuilder b("two_regions");
  auto x = b.add_parameter(av(DType::kFloat64, dims));
  auto bias = b.add_parameter(av(DType::kFloat64, {3}));
  auto z = b.binary(OpKind::kAdd, x, b.broadcast_in_dim(bias, concrete_shape(dims), {1}));
  auto m = b.unary(OpKind::kStopGradient, b.emit_or_throw(OpKind::kReduceMax, {z}, {{"dimensions", Ints{1}}}));
  auto mb = b.broadcast_in_dim(b.reshape(m, concrete_shape({6, 1})), concrete_shape(dims), {0, 1});
  auto d = b.binary(OpKind::kSub, z, mb);
  auto lse = b.unary(OpKind::kLog, b.reshape(b.reduce_sum(b.unary(OpKind::kExp, d), {1}), concrete_shape({6, 1})));
  auto y = b.binary(OpKind::kSub, d, b.broadcast_in_dim(lse, concrete_shape(dims), {0, 1}));
  ir::Program p = std::move(b).build({y});
  expect_region_correct(p, {test::random_buffer(DType::kFloat64, dims, 18, -3, 3),
                            test::random_buffer(DType::kFloat64, {3}, 19)}, 1e-12, 1e-12);
}

TEST(RowFusion, Rank3ReductionsOverMiddleAndLastAxes) {
  // Rows are dim 0; one reduction is over the last axis, one over the middle axis (a column reduction
  // inside each row block), both broadcast back.
  const Ints dims = {67, 33, 17};
  ir::ProgramBuilder b("rank3");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  auto m2 = b.emit_or_throw(OpKind::kReduceMax, {x}, {{"dimensions", Ints{2}}});
  auto s1 = b.reduce_sum(x, {1});
  auto c = b.binary(OpKind::kSub, x, b.broadcast_in_dim(m2, concrete_shape(dims), {0, 1}));
  auto y = b.binary(OpKind::kMul, b.unary(OpKind::kExp, c), b.broadcast_in_dim(s1, concrete_shape(dims), {0, 2}));
  auto t = b.reduce_sum(y, {1, 2});
  ir::Program p = std::move(b).build({y, t});
  expect_region_correct(p, {test::random_buffer(DType::kFloat32, dims, 15, -2, 2)}, 1e-5, 1e-5);
}

TEST(RowFusion, SixteenBitAndDoubleSoftmax) {
  for (DType t : {DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    const Ints dims = {70, 515};
    ir::ProgramBuilder b(std::string("softmax_") + std::string(dtype_short_name(t)));
    auto x = b.add_parameter(av(t, dims));
    const ValueId y = softmax(b, x, dims).y;
    ir::Program p = std::move(b).build({y});
    expect_region_correct(p, {test::random_buffer(t, dims, 16, -3, 3)}, default_rtol(t) * 4, 1e-3);
  }
}

TEST(RowFusion, ManyBlocksBitwiseAcrossThreadCounts) {
  // Large enough for many cache-sized blocks per thread.
  const Ints dims = {1500, 1031};
  ir::ProgramBuilder b("softmax_big");
  auto x = b.add_parameter(av(DType::kFloat32, dims));
  Softmax sm = softmax(b, x, dims);
  ir::Program p = std::move(b).build({sm.y, sm.s});
  expect_region_correct(p, {test::random_buffer(DType::kFloat32, dims, 17, -6, 6)}, 1e-5, 1e-8);
}

}  // namespace
}  // namespace mcx::cpu::testing
