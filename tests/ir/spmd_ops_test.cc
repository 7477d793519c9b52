// Shape rules of the SPMD ops (opset 2), their passes behaviour, and the references that the backend
// and the partitioner are tested against (reference_eval's single-partition semantics, spmd_reference).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir_test_programs.h"
#include "mcx/core/error.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/ir/text.h"
#include "tests/support/reference_eval.h"
#include "tests/support/spmd_reference.h"
#include "tests/support/test_util.h"

namespace mcx::ir {
namespace {

using testing::HasSubstr;
using testing_programs::type_of;
using Ints = std::vector<int64_t>;

std::string rule_error(OpKind k, std::vector<AbstractValue> ops, Attrs attrs) {
  auto t = infer_type(k, ops, attrs, SymbolicScope());
  return t.ok() ? "ok: " + t->to_string() : std::string(t.status().message());
}
std::string rule_ok(OpKind k, std::vector<AbstractValue> ops, Attrs attrs) {
  auto t = infer_type(k, ops, attrs, SymbolicScope());
  return t.ok() ? t->to_string() : "error: " + std::string(t.status().message());
}

TEST(SpmdShapeRules, ResultTypes) {
  AbstractValue x = type_of("f32[4,6]");
  EXPECT_EQ(rule_ok(OpKind::kAllReduce, {x}, all_reduce_attrs(ReduceOp::kSum, {0, 1, 2}, 3)), "f32[4,6]");
  EXPECT_EQ(rule_ok(OpKind::kAllGather, {x}, all_gather_attrs(1, {1, 0, 2, 3}, 2)), "f32[4,12]");
  EXPECT_EQ(rule_ok(OpKind::kReduceScatter, {x}, reduce_scatter_attrs(1, ReduceOp::kMax, {0, 1, 2}, 3)),
            "f32[4,2]");
  EXPECT_EQ(rule_ok(OpKind::kAllToAll, {x}, all_to_all_attrs(1, 0, {0, 1}, 2)), "f32[8,3]");
  EXPECT_EQ(rule_ok(OpKind::kAllToAll, {x}, all_to_all_attrs(0, 0, {0, 1, 2, 3}, 4)), "f32[4,6]");
  EXPECT_EQ(rule_ok(OpKind::kCollectivePermute, {x}, collective_permute_attrs({0, 1, 1, 0})), "f32[4,6]");
  EXPECT_EQ(rule_ok(OpKind::kAxisIndex, {}, axis_index_attrs({2, 4}, 1)), "i32[]");
  EXPECT_EQ(rule_ok(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{1, 1, 0}}, {"mesh_shape", Ints{2, 4}}}),
            "f32[4,6]");
  EXPECT_EQ(rule_ok(OpKind::kAllReduce, {type_of("bool[3]")}, all_reduce_attrs(ReduceOp::kMin, {0}, 1)), "bool[3]");
  // Symbolic: 2*b split over 2 is b.
  EXPECT_EQ(rule_ok(OpKind::kReduceScatter, {type_of("f32[2*b,3]")}, reduce_scatter_attrs(0, ReduceOp::kSum, {0, 1}, 2)),
            "f32[b,3]");
}

TEST(SpmdShapeRules, ClearErrors) {
  AbstractValue x = type_of("f32[4,6]");
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, all_reduce_attrs(ReduceOp::kSum, {0, 2, 2, 3}, 2)),
              HasSubstr("[all_reduce] attribute 'replica_groups' [0,2,2,3] lists partition 2 twice"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, all_reduce_attrs(ReduceOp::kSum, {0, 1, 4}, 3)),
              HasSubstr("entry 2 is 4, expected a partition id in [0, 3)"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, all_reduce_attrs(ReduceOp::kSum, {0, 1, 2}, 2)),
              HasSubstr("has 3 entries, expected a non-empty multiple of group_size 2"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, all_reduce_attrs(ReduceOp::kSum, {0}, 0)),
              HasSubstr("'group_size' is 0, expected >= 1"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, Attrs{{"reduce", int64_t{7}}, {"replica_groups", Ints{0}},
                                                         {"group_size", int64_t{1}}}),
              HasSubstr("[all_reduce] attribute 'reduce' is 7"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {type_of("bool[2]")}, all_reduce_attrs(ReduceOp::kSum, {0}, 1)),
              HasSubstr("operand must be numeric for reduce sum, found bool[2]"));
  EXPECT_THAT(rule_error(OpKind::kAllGather, {type_of("f32[]")}, all_gather_attrs(0, {0}, 1)),
              HasSubstr("[all_gather] operand must have rank >= 1, found f32[]"));
  EXPECT_THAT(rule_error(OpKind::kAllGather, {x}, all_gather_attrs(2, {0}, 1)),
              HasSubstr("attribute 'dimension' is 2, expected an axis in [0, 2) for f32[4,6]"));
  EXPECT_THAT(rule_error(OpKind::kReduceScatter, {x}, reduce_scatter_attrs(0, ReduceOp::kSum, {0, 1, 2}, 3)),
              HasSubstr("[reduce_scatter] f32[4,6] dim 0 (dimension) is 4, not divisible by group_size 3"));
  EXPECT_THAT(rule_error(OpKind::kReduceScatter, {type_of("f32[b]")}, reduce_scatter_attrs(0, ReduceOp::kSum, {0, 1}, 2)),
              HasSubstr("is b, not known to be divisible by group_size 2"));
  EXPECT_THAT(rule_error(OpKind::kAllToAll, {x}, all_to_all_attrs(0, 1, {0, 1, 2}, 3)),
              HasSubstr("[all_to_all] f32[4,6] dim 0 (split_dimension) is 4, not divisible by group_size 3"));
  EXPECT_THAT(rule_error(OpKind::kAllToAll, {x}, all_to_all_attrs(0, 5, {0}, 1)),
              HasSubstr("attribute 'concat_dimension' is 5"));
  EXPECT_THAT(rule_error(OpKind::kCollectivePermute, {x}, collective_permute_attrs({0, 1, 1})),
              HasSubstr("has 3 entries, expected (source, target) pairs"));
  EXPECT_THAT(rule_error(OpKind::kCollectivePermute, {x}, collective_permute_attrs({0, 1, 2, 1})),
              HasSubstr("has target 1 twice"));
  EXPECT_THAT(rule_error(OpKind::kCollectivePermute, {x}, collective_permute_attrs({0, 1, 0, 2})),
              HasSubstr("has source 0 twice"));
  EXPECT_THAT(rule_error(OpKind::kCollectivePermute, {x}, collective_permute_attrs({0, -1})),
              HasSubstr("expected partition ids in [0, 1048576)"));
  EXPECT_THAT(rule_error(OpKind::kAxisIndex, {}, axis_index_attrs({2, 4}, 2)),
              HasSubstr("[axis_index] attribute 'axis' is 2, expected a mesh axis in [0, 2)"));
  EXPECT_THAT(rule_error(OpKind::kAxisIndex, {}, axis_index_attrs({1 << 15, 1 << 15, 2}, 0)),
              HasSubstr("has more than 1048576 devices"));
  EXPECT_THAT(rule_error(OpKind::kAxisIndex, {}, axis_index_attrs({2, 0}, 0)),
              HasSubstr("'mesh_shape' [2,0] entry 1 is 0, expected >= 1"));
  EXPECT_THAT(rule_error(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{1, 2}}, {"mesh_shape", Ints{2, 4}}}),
              HasSubstr("names mesh axis 2, expected an axis in [0, 2)"));
  EXPECT_THAT(rule_error(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{1, 0, 1, 0}}, {"mesh_shape", Ints{2, 4}}}),
              HasSubstr("uses mesh axis 0 twice"));
  EXPECT_THAT(rule_error(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{-1, 1, 1}}, {"mesh_shape", Ints{2, 4}}}),
              HasSubstr("f32[4,6] dim 1 is 6, not divisible by its 4 shards"));
  EXPECT_THAT(rule_error(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{-1, -1, -1}}, {"mesh_shape", Ints{2}}}),
              HasSubstr("has more dimensions than f32[4,6]"));
  EXPECT_THAT(rule_error(OpKind::kShardingConstraint, {x}, Attrs{{"sharding", Ints{3, 0}}, {"mesh_shape", Ints{2}}}),
              HasSubstr("dimension 0 has axis count 3"));
  EXPECT_THAT(rule_error(OpKind::kAllReduce, {x}, Attrs{{"reduce", int64_t{0}}, {"group_size", int64_t{1}}}),
              HasSubstr("[all_reduce] "));
  EXPECT_THAT(rule_error(OpKind::kAxisIndex, {}, Attrs{{"axis", int64_t{0}}, {"mesh_shape", Ints{2}}, {"bogus", int64_t{1}}}),
              HasSubstr("[axis_index] unexpected attribute 'bogus'"));
}

TEST(SpmdOps, FingerprintOfOldProgramsKeepsOpset1) {
  EXPECT_EQ(required_opset(testing_programs::all_ops_program()), 1);
  EXPECT_EQ(required_opset(testing_programs::spmd_ops_program()), 2);
  EXPECT_TRUE(verify(testing_programs::spmd_ops_program()).ok());
}

// Folding never evaluates a collective or drops a sharding constraint; axis_index is not a constant.
TEST(SpmdOps, PassesKeepCollectivesAndAxisIndex) {
  ProgramBuilder b("p");
  ValueId c = b.constant(Buffer::from_vector<float>({1, 2}, {2}));
  ValueId ar = b.emit_or_throw(OpKind::kAllReduce, {c}, all_reduce_attrs(ReduceOp::kSum, {0, 1}, 2));
  ValueId sc = b.emit_or_throw(OpKind::kShardingConstraint, {c}, {{"sharding", Ints{1, 0}}, {"mesh_shape", Ints{2}}});
  ValueId ai = b.emit_or_throw(OpKind::kAxisIndex, {}, axis_index_attrs({2}, 0));
  ValueId ai2 = b.emit_or_throw(OpKind::kAxisIndex, {}, axis_index_attrs({2}, 0));
  ValueId ai_other = b.emit_or_throw(OpKind::kAxisIndex, {}, axis_index_attrs({1, 2}, 1));
  ValueId unused = b.emit_or_throw(OpKind::kAllGather, {c}, all_gather_attrs(0, {0, 1}, 2));
  (void)unused;
  ValueId ar2 = b.emit_or_throw(OpKind::kAllReduce, {c}, all_reduce_attrs(ReduceOp::kSum, {1, 0}, 2));
  Program p = std::move(b).build({ar, sc, ai, ai2, ai_other, ar2});
  int evaluated = 0;
  ConstantEvaluator eval = [&](const Instr& in, std::span<const Buffer> args) {
    ++evaluated;
    return test::reference_evaluate_instr(in, args);
  };
  Program f = value_or_throw(fold_constants(p, eval));
  EXPECT_EQ(evaluated, 0);
  EXPECT_EQ(testing_programs::kinds_used(f).count(OpKind::kAllGather), 0u) << "DCE removes an unused collective";
  EXPECT_EQ(f.defining_instr(f.results[0]).kind, OpKind::kAllReduce);
  EXPECT_EQ(f.defining_instr(f.results[1]).kind, OpKind::kShardingConstraint);
  EXPECT_EQ(f.defining_instr(f.results[2]).kind, OpKind::kAxisIndex);
  // CSE merges identical axis_index ops but not different meshes, nor collectives over other groups.
  Program e = eliminate_common_subexpressions(f);
  EXPECT_EQ(e.results[2], e.results[3]);
  EXPECT_NE(e.results[2], e.results[4]);
  EXPECT_NE(e.results[0], e.results[5]);
}

TEST(SpmdOps, TextRoundTripOfEveryAttribute) {
  Program p = testing_programs::spmd_ops_program();
  std::string text = print_program(p);
  EXPECT_THAT(text, HasSubstr("all_reduce(%0) {group_size=2, reduce=0, replica_groups=[0, 1, 2, 3]} : f32[b,4]"));
  EXPECT_THAT(text, HasSubstr("axis_index() {axis=1, mesh_shape=[2, 2]} : i32[]"));
  Program q = value_or_throw(parse_program(text));
  EXPECT_TRUE(structurally_equal(p, q));
  EXPECT_EQ(fingerprint_hex(p), fingerprint_hex(q));
}

}  // namespace
}  // namespace mcx::ir

namespace mcx::test {
namespace {

using ir::OpKind;
using Ints = std::vector<int64_t>;

Buffer f32(std::vector<float> v, std::vector<int64_t> dims) { return Buffer::from_vector<float>(v, dims); }
AbstractValue type_of_f32(std::vector<int64_t> dims) { return AbstractValue{DType::kFloat32, concrete_shape(dims)}; }

std::vector<std::vector<Buffer>> run(const ir::Program& p, const std::vector<std::vector<Buffer>>& args) {
  return value_or_throw(spmd_reference_evaluate(p, static_cast<int>(args.size()), args));
}

TEST(SpmdReference, AllReduceInGroups) {
  ir::Program p = single_op_program(OpKind::kAllReduce, {type_of_f32({2})},
                                    ir::all_reduce_attrs(ReduceOp::kSum, {0, 2, 1, 3}, 2));
  auto out = run(p, {{f32({1, 2}, {2})}, {f32({10, 20}, {2})}, {f32({100, 200}, {2})}, {f32({1000, 2000}, {2})}});
  expect_buffers_near(out[0][0], f32({101, 202}, {2}), 0, 0);
  expect_buffers_near(out[2][0], f32({101, 202}, {2}), 0, 0);
  expect_buffers_near(out[1][0], f32({1010, 2020}, {2}), 0, 0);
  expect_buffers_near(out[3][0], f32({1010, 2020}, {2}), 0, 0);
}

TEST(SpmdReference, AllGatherReduceScatterAllToAllAlongInnerDims) {
  // Partition p holds a 2x2 block [[p, p+.1], [p+.2, p+.3]].
  std::vector<std::vector<Buffer>> args;
  for (int q = 0; q < 2; ++q) args.push_back({f32({float(q), q + .1f, q + .2f, q + .3f}, {2, 2})});
  auto ag = run(single_op_program(OpKind::kAllGather, {type_of_f32({2, 2})}, ir::all_gather_attrs(1, {1, 0}, 2)), args);
  expect_buffers_near(ag[0][0], f32({1, 1.1f, 0, .1f, 1.2f, 1.3f, .2f, .3f}, {2, 4}), 0, 0);
  auto rs = run(single_op_program(OpKind::kReduceScatter, {type_of_f32({2, 2})},
                                  ir::reduce_scatter_attrs(1, ReduceOp::kSum, {0, 1}, 2)),
                args);
  expect_buffers_near(rs[0][0], f32({1, 1.4f}, {2, 1}), 1e-6, 0);
  expect_buffers_near(rs[1][0], f32({1.2f, 1.6f}, {2, 1}), 1e-6, 0);
  // split along dim 1, concat along dim 0: member r gets column r of every member, stacked.
  auto a2a = run(single_op_program(OpKind::kAllToAll, {type_of_f32({2, 2})}, ir::all_to_all_attrs(1, 0, {0, 1}, 2)),
                 args);
  expect_buffers_near(a2a[0][0], f32({0, .2f, 1, 1.2f}, {4, 1}), 0, 0);
  expect_buffers_near(a2a[1][0], f32({.1f, .3f, 1.1f, 1.3f}, {4, 1}), 0, 0);
  // split and concat along the same dim: member r gets row r of every member in place of block r.
  auto same = run(single_op_program(OpKind::kAllToAll, {type_of_f32({2, 2})}, ir::all_to_all_attrs(0, 0, {0, 1}, 2)),
                  args);
  expect_buffers_near(same[0][0], f32({0, .1f, 1, 1.1f}, {2, 2}), 0, 0);
  expect_buffers_near(same[1][0], f32({.2f, .3f, 1.2f, 1.3f}, {2, 2}), 0, 0);
}

TEST(SpmdReference, PermuteAxisIndexAndReductionsOfBool) {
  ir::Program perm = single_op_program(OpKind::kCollectivePermute, {type_of_f32({1})},
                                       ir::collective_permute_attrs({0, 2, 2, 1}));
  auto out = run(perm, {{f32({5}, {1})}, {f32({6}, {1})}, {f32({7}, {1})}});
  expect_buffers_near(out[0][0], f32({0}, {1}), 0, 0);
  expect_buffers_near(out[1][0], f32({7}, {1}), 0, 0);
  expect_buffers_near(out[2][0], f32({5}, {1}), 0, 0);
  ir::ProgramBuilder b("axes");
  ir::ValueId a0 = b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({2, 4}, 0));
  ir::ValueId a1 = b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({2, 4}, 1));
  ir::Program axes = std::move(b).build({a0, a1});
  auto ax = run(axes, std::vector<std::vector<Buffer>>(8));
  for (int q = 0; q < 8; ++q) {
    EXPECT_EQ(ax[q][0].data<int32_t>()[0], q / 4);
    EXPECT_EQ(ax[q][1].data<int32_t>()[0], q % 4);
  }
  AbstractValue bt{DType::kBool, concrete_shape({2})};
  auto any = run(single_op_program(OpKind::kAllReduce, {bt}, ir::all_reduce_attrs(ReduceOp::kMax, {0, 1}, 2)),
                 {{Buffer::from_vector<bool>({true, false}, {2})}, {Buffer::from_vector<bool>({false, false}, {2})}});
  EXPECT_TRUE(any[1][0].bitwise_equal(Buffer::from_vector<bool>({true, false}, {2})));
}

TEST(SpmdReference, SinglePartitionSemanticsOfReferenceEvaluate) {
  Buffer x = f32({1, 2, 3}, {3});
  auto eval = [&](OpKind k, ir::Attrs a) { return reference_evaluate(single_op_program(k, {type_of_f32({3})}, a), {{x}}); };
  EXPECT_TRUE(value_or_throw(eval(OpKind::kAllReduce, ir::all_reduce_attrs(ReduceOp::kProd, {0}, 1)))[0].bitwise_equal(x));
  EXPECT_TRUE(value_or_throw(eval(OpKind::kAllGather, ir::all_gather_attrs(0, {0}, 1)))[0].bitwise_equal(x));
  EXPECT_TRUE(value_or_throw(eval(OpKind::kCollectivePermute, ir::collective_permute_attrs({0, 0})))[0].bitwise_equal(x));
  EXPECT_TRUE(value_or_throw(eval(OpKind::kCollectivePermute, ir::collective_permute_attrs({})))[0].bitwise_equal(
      f32({0, 0, 0}, {3})));
  auto big = eval(OpKind::kAllReduce, ir::all_reduce_attrs(ReduceOp::kSum, {0, 1}, 2));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), testing::HasSubstr("cover 2 partitions, the program runs on 1"));
  EXPECT_EQ(eval(OpKind::kCollectivePermute, ir::collective_permute_attrs({0, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  ir::ProgramBuilder b("ai");
  ir::ValueId v = b.emit_or_throw(OpKind::kAxisIndex, {}, ir::axis_index_attrs({2, 2}, 0));
  ir::Program ai = std::move(b).build({v});
  EXPECT_EQ(value_or_throw(reference_evaluate(ai, {}))[0].data<int32_t>()[0], 0);
}

}  // namespace
}  // namespace mcx::test
