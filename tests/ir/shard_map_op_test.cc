// The shard_map op's attribute checks and shape rule (every error names what it expected and found) and the
// replica groups of mesh axes.
#include "mcx/ir/shard_map.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/shape_rules.h"
#include "tests/ir/ir_test_programs.h"

namespace mcx::ir {
namespace {

using ::testing::HasSubstr;
using testing_programs::type_of;

// The error of infer_type for a shard_map over `mesh` whose body takes `body_param` and returns it.
std::string error_for(const std::vector<int64_t>& mesh, const std::string& operand, const std::string& body_param,
                      std::vector<int64_t> in_specs) {
  ProgramBuilder pb("body");
  ValueId p = pb.add_parameter(type_of(body_param));
  auto body = std::make_shared<const Program>(std::move(pb).build({p}));
  Attrs attrs{{"regions", Regions{body}},
              {"mesh_shape", mesh},
              {"in_specs", std::move(in_specs)},
              {"out_specs", std::vector<int64_t>(static_cast<size_t>(type_of(body_param).rank()), 0)},
              {"result", int64_t{0}}};
  const std::vector<AbstractValue> operands{type_of(operand)};
  auto t = infer_type(OpKind::kShardMap, operands, attrs, SymbolicScope());
  return t.ok() ? std::string("ok: ") + t->to_string() : std::string(t.status().message());
}

TEST(ShardMapOp, ShapeRuleSplitsOperandsAndAssemblesResults) {
  // f32[8,3] split 4 ways along dim 0 (mesh axis 1 of [2, 4]); the result split the same way.
  ProgramBuilder pb("body");
  ValueId p = pb.add_parameter(type_of("f32[2,3]"));
  auto body = std::make_shared<const Program>(std::move(pb).build({p, pb.reduce_sum(p, {0, 1})}));
  ShardMapConfig c{body, {2, 4}, {{{1}, {}}}, {{{1}, {}}, {}}, 0};
  const std::vector<AbstractValue> operands{type_of("f32[8,3]")};
  auto types = shard_map_result_types(operands, shard_map_attrs(c));
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ((*types)[0].to_string(), "f32[8,3]");
  EXPECT_EQ((*types)[1].to_string(), "f32[]");
  auto back = get_shard_map_config(shard_map_attrs(c), operands);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->in_specs, c.in_specs);
  EXPECT_EQ(back->out_specs, c.out_specs);
  EXPECT_EQ(unnamed_axes(c.in_specs[0], c.mesh_shape), std::vector<int>{0});
  EXPECT_EQ(spec_shards(c.in_specs[0], c.mesh_shape, 0), 4);
}

TEST(ShardMapOp, ErrorsNameTheOperandDimensionAndSpec) {
  EXPECT_EQ(error_for({4}, "f32[8]", "f32[2]", {1, 0}), "ok: f32[2]");  // the result is not split
  EXPECT_THAT(error_for({4}, "f32[6]", "f32[2]", {1, 0}),
              HasSubstr("[shard_map] operand 0 (f32[6]) dimension 0 (6) is not divisible by the 4 devices"));
  EXPECT_THAT(error_for({4}, "f32[8]", "f32[8]", {1, 0}),
              HasSubstr("body parameter 0 is f32[8], expected f32[2]"));
  EXPECT_THAT(error_for({4}, "f32[8]", "f32[2]", {1, 3}), HasSubstr("names mesh axis 3, the mesh has 1 axes"));
  EXPECT_THAT(error_for({2, 2}, "f32[8]", "f32[2]", {2, 0, 0}), HasSubstr("names mesh axis 0 twice"));
  EXPECT_THAT(error_for({4}, "f32[8]", "f32[2]", {1}), HasSubstr("dimension 0 has axis count 1"));
  EXPECT_THAT(error_for({4}, "f32[8]", "f32[2]", {1, 0, 7}), HasSubstr("1 values after the last operand's spec"));
  EXPECT_THAT(error_for({0}, "f32[8]", "f32[2]", {1, 0}), HasSubstr("axis size 0, expected >= 1"));
  EXPECT_THAT(error_for({1 << 20, 1 << 20}, "f32[8]", "f32[8]", {0}), HasSubstr("more than 2^31-1 devices"));
  const SymbolicScope scope = value_or_throw(SymbolicScope::create({"b >= 1"}));
  ProgramBuilder pb("body", scope);
  ValueId p = pb.add_parameter(type_of("f32[b]"));
  auto body = std::make_shared<const Program>(std::move(pb).build({p}));
  Attrs attrs = shard_map_attrs(ShardMapConfig{body, {2}, {{{0}}}, {{{0}}}, 0});
  const std::vector<AbstractValue> symbolic{type_of("f32[b]")};
  EXPECT_THAT(std::string(infer_type(OpKind::kShardMap, symbolic, attrs, scope).status().message()),
              HasSubstr("dimension 0 is symbolic and split over 2 devices"));
}

TEST(ShardMapOp, MeshAxisGroupsAreRowMajorPositions) {
  using Groups = std::vector<std::vector<int64_t>>;
  const std::vector<int64_t> mesh{2, 3};
  EXPECT_EQ(mesh_axis_groups(mesh, std::vector<int>{0}), (Groups{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(mesh_axis_groups(mesh, std::vector<int>{1}), (Groups{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(mesh_axis_groups(mesh, std::vector<int>{1, 0}), (Groups{{0, 3, 1, 4, 2, 5}}));
  EXPECT_EQ(mesh_axis_groups(mesh, std::vector<int>{}), (Groups{{0}, {1}, {2}, {3}, {4}, {5}}));
}

}  // namespace
}  // namespace mcx::ir
