#include "gmock/gmock.h"
#include "tests/trace/trace_test_util.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using testing_util::error_of;

Array a1() { return array<float>({1, 2}, {2}); }
Array a2() { return array<float>({3}, {1}); }
Array a3() { return array({7, 8, 9}); }

void expect_same_leaves(const std::vector<Array>& x, const std::vector<Array>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].impl(), y[i].impl()) << "leaf " << i;
}

TEST(PyTreeTest, StaticContainersRoundTrip) {
  using T = std::tuple<Array, std::vector<Array>, std::map<std::string, Array>, std::pair<Array, Array>>;
  T t{a1(), {a2(), a3()}, {{"z", a1()}, {"a", a2()}}, {a3(), a1()}};
  auto [leaves, def] = tree_flatten(t);
  EXPECT_EQ(leaves.size(), 7u);
  EXPECT_EQ(def.num_leaves(), 7u);
  EXPECT_EQ(def.to_string(), "tuple(*, list[*, *], dict{a: *, z: *}, tuple(*, *))");
  // Dict leaves come in key order: "a" before "z".
  EXPECT_EQ(leaves[3].impl(), std::get<2>(t).at("a").impl());
  T back = tree_unflatten<T>(def, leaves);
  expect_same_leaves(tree_leaves(back), leaves);
  EXPECT_EQ(tree_structure(back), def);
}

TEST(PyTreeTest, DynamicTreeRoundTripAndAccess) {
  Tree params = Tree::Dict{{"layers", Tree::List{Tree::Dict{{"w", a1()}, {"b", a2()}}, Tree::Dict{{"w", a3()}}}},
                           {"scale", a2()}};
  auto [leaves, def] = tree_flatten(params);
  EXPECT_EQ(def.to_string(), "dict{layers: list[dict{b: *, w: *}, dict{w: *}], scale: *}");
  Tree back = tree_unflatten<Tree>(def, leaves);
  expect_same_leaves(tree_leaves(back), leaves);
  EXPECT_EQ(back.at("layers").at(1).at("w").array().impl(), leaves[2].impl());
  EXPECT_THAT(error_of([&] { (void)params.at("missing"); }), HasSubstr("key 'missing' not found; keys are {layers, scale}"));
  EXPECT_THAT(error_of([&] { (void)params.at("scale").list(); }), HasSubstr("expected a list, found a leaf"));
  // A static container flattens to the same structure as the equivalent Tree.
  std::map<std::string, Array> m{{"b", a1()}, {"w", a2()}};
  EXPECT_EQ(tree_structure(m), tree_structure(Tree(Tree::Dict{{"b", a1()}, {"w", a2()}})));
}

TEST(PyTreeTest, StructureComparisonAndMismatchErrors) {
  std::vector<Array> two{a1(), a2()}, three{a1(), a2(), a3()};
  EXPECT_NE(tree_structure(two), tree_structure(three));
  EXPECT_EQ(tree_structure(two), tree_structure(std::vector<Array>{a3(), a3()}));
  EXPECT_NE(tree_structure(std::make_tuple(a1(), a2())), tree_structure(two));  // tuple vs list
  auto [leaves, def] = tree_flatten(three);
  EXPECT_THAT(error_of([&] { (void)tree_unflatten<std::vector<Array>>(def, two); }),
              HasSubstr("expected 3 leaves for list[*, *, *], found 2"));
  EXPECT_THAT(error_of([&] { (void)tree_unflatten<std::map<std::string, Array>>(def, leaves); }),
              HasSubstr("expected a dict"));
}

TEST(PyTreeTest, TreeMapOneAndTwoTrees) {
  Tree params = Tree::Dict{{"w", a1()}, {"b", a2()}};
  Tree grads = tree_map([](const Array& x) { return x * 10.0; }, params);
  EXPECT_EQ(grads.at("w").array().to_vector<float>(), (std::vector<float>{10, 20}));
  Tree updated = tree_map([](const Array& p, const Array& g) { return p - 0.1 * g; }, params, grads);
  EXPECT_EQ(updated.at("b").array().to_vector<float>(), (std::vector<float>{0}));
  EXPECT_THAT(error_of([&] { (void)tree_map([](const Array& p, const Array&) { return p; }, params,
                                          Tree(Tree::Dict{{"w", a1()}})); }),
              HasSubstr("[tree_map] trees have different structures"));
  auto v = tree_map([](const Array& x) { return x + 1; }, std::vector<Array>{a1(), a3()});
  EXPECT_EQ(v[1].to_vector<int>(), (std::vector<int>{8, 9, 10}));
  EXPECT_EQ(v[1].dtype(), DType::kInt32);
}

}  // namespace
}  // namespace mcx
