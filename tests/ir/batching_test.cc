// Program-level vmap: cases the per-op checks (check_vmap, called by every VJP test) do not reach —
// batched indices and starts, unbatched results, nested vmap, symbolic batch sizes and the errors.
#include <string>

#include "gtest/gtest.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/passes.h"
#include "tests/ir/ir_test_util.h"
#include "tests/support/reference_eval.h"
#include "tests/support/test_util.h"

namespace mcx::test {
namespace {

using ir::ProgramBuilder;

TEST(Vmap, BatchedIndicesAndStartsAgainstEachExample) {
  // take with batched indices (x unbatched and batched), dynamic_slice with a batched start, scatter_add
  // with batched indices: check_vmap batches every parameter, then the floating ones alone.
  ProgramBuilder b("gather");
  ValueId x = b.add_parameter(f64({5, 3}));
  ValueId idx = b.add_parameter(i32({4}));
  ValueId start = b.add_parameter(i32({}));
  ValueId taken = b.emit_or_throw(OpKind::kTake, {x, idx});
  ValueId window = b.emit_or_throw(OpKind::kDynamicSlice, {x, start, start}, {{"sizes", concrete_shape({2, 2})}});
  ValueId scattered = b.emit_or_throw(OpKind::kScatterAdd, {x, idx, taken});
  Program f = std::move(b).build({taken, window, scattered});
  check_vmap(f, {rnd({5, 3}, 1), Buffer::from_vector<int32_t>({4, 0, 2, 7}, {4}), Buffer::scalar<int32_t>(2)}, 2);

  // Indices batched alone (x shared by every example): the rows come from one table.
  for (const std::vector<bool>& batched : {std::vector<bool>{false, true, false}, std::vector<bool>{false, false, true}}) {
    auto v = ir::vmap_program(f, batched, DimExpr(2));
    ASSERT_TRUE(v.ok()) << v.status();
    Buffer xv = rnd({5, 3}, 3);
    Buffer idx0 = Buffer::from_vector<int32_t>({1, 1, 3, 0}, {4}), idx1 = Buffer::from_vector<int32_t>({2, 4, 0, 0}, {4});
    Buffer s0 = Buffer::scalar<int32_t>(0), s1 = Buffer::scalar<int32_t>(3);
    std::vector<Buffer> vargs = {xv, batched[1] ? Buffer::from_vector<int32_t>({1, 1, 3, 0, 2, 4, 0, 0}, {2, 4}) : idx0,
                                 batched[2] ? Buffer::from_vector<int32_t>({0, 3}, {2}) : s0};
    auto out = reference_evaluate(*v, vargs);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int e = 0; e < 2; ++e) {
      auto want = reference_evaluate(f, std::vector<Buffer>{xv, batched[1] && e == 1 ? idx1 : idx0,
                                                           batched[2] && e == 1 ? s1 : s0});
      ASSERT_TRUE(want.ok());
      for (size_t j = 0; j < 3; ++j) {
        std::vector<double> all = (*out)[j].to_doubles(), one = (*want)[j].to_doubles();
        for (size_t k = 0; k < one.size(); ++k) {
          EXPECT_EQ(all[e * one.size() + k], one[k]) << "result " << j << " example " << e;
        }
      }
    }
  }
}

TEST(Vmap, RandomBitsWithBatchedCountsOrKeys) {
  ProgramBuilder b("bits");
  ValueId key = b.add_parameter(AbstractValue{DType::kUInt32, concrete_shape({2})});
  ValueId counts = b.add_parameter(AbstractValue{DType::kUInt32, concrete_shape({3, 2})});
  Program f = std::move(b).build({b.emit_or_throw(OpKind::kThreefry2x32, {key, counts})});
  check_vmap(f, {Buffer::from_vector<uint32_t>({7, 9}, {2}), Buffer::from_vector<uint32_t>({0, 1, 2, 3, 4, 5}, {3, 2})}, 1);
}

TEST(Vmap, UnbatchedResultsAreBroadcastAndNestedVmapWorks) {
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(f64({3}));
  ValueId c = b.add_parameter(f64({3}));
  Program f = std::move(b).build({b.binary(OpKind::kMul, x, c), b.unary(OpKind::kExp, c)});
  auto v = ir::vmap_program(f, {true, false}, DimExpr(2));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->type(v->results[1]), f64({2, 3}));
  // vmap of vmap: the outer batch axis first.
  auto vv = ir::vmap_program(*v, {true, true}, DimExpr(4));
  ASSERT_TRUE(vv.ok()) << vv.status();
  EXPECT_EQ(vv->params[0], f64({4, 2, 3}));
  EXPECT_EQ(vv->params[1], f64({4, 3}));
  EXPECT_EQ(vv->type(vv->results[0]), f64({4, 2, 3}));
  Buffer xs = rnd({4, 2, 3}, 1), cs = rnd({4, 3}, 2);
  auto out = reference_evaluate(*vv, std::vector<Buffer>{xs, cs});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ((*out)[0].data<double>()[(i * 2 + j) * 3 + k], xs.data<double>()[(i * 2 + j) * 3 + k] * cs.data<double>()[i * 3 + k]);
      }
}

TEST(Vmap, SymbolicBatchSizeUnlessTheOpMustBeUnrolled) {
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(f64({4, 3}));
  ValueId w = b.add_parameter(f64({3, 2}));
  ValueId y = b.emit_or_throw(OpKind::kDotGeneral, {x, w},
                              {{"lhs_batch", V{}}, {"rhs_batch", V{}}, {"lhs_contracting", V{1}}, {"rhs_contracting", V{0}}});
  Program f = std::move(b).build({b.reduce_sum(b.unary(OpKind::kTanh, y), {1})});
  const DimExpr n = DimExpr::var("n");
  auto v = ir::vmap_program(f, {true, true}, n);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(ir::verify(*v).ok()) << ir::verify(*v);
  EXPECT_EQ(v->type(v->results[0]), (AbstractValue{DType::kFloat64, symbolic_shape("n, 4")}));
  auto concrete = ir::specialize(*v, {{"n", 3}});
  ASSERT_TRUE(concrete.ok()) << concrete.status();

  ProgramBuilder g("dyn");
  ValueId a = g.add_parameter(f64({5}));
  ValueId s = g.add_parameter(i32({}));
  Program h = std::move(g).build({g.emit_or_throw(OpKind::kDynamicSlice, {a, s}, {{"sizes", concrete_shape({2})}})});
  auto u = ir::vmap_program(h, {false, true}, n);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(u.status().message()).find("[vmap] dynamic_slice"), std::string::npos) << u.status();
  EXPECT_NE(std::string(u.status().message()).find("symbolic size n"), std::string::npos) << u.status();
  EXPECT_TRUE(ir::vmap_program(h, {false, true}, DimExpr(3)).ok());  // concrete: unrolled
}

TEST(Vmap, BadArgumentsAreInvalidArgument) {
  ProgramBuilder b("f");
  ValueId x = b.add_parameter(f64({3}));
  Program f = std::move(b).build({b.unary(OpKind::kExp, x)});
  auto wrong_count = ir::vmap_program(f, {true, true}, DimExpr(2));
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(std::string(wrong_count.status().message()).find("expected one batched flag per parameter"), std::string::npos);
  auto none = ir::vmap_program(f, {false}, DimExpr(2));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no parameter"), std::string::npos);
  EXPECT_FALSE(ir::vmap_program(f, {true}, DimExpr(0)).ok());
}

}  // namespace
}  // namespace mcx::test
