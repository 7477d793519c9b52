// Custom pytree nodes (JAX's register_pytree_node): a user type flattens to its children and auxiliary data,
// nests in other pytrees, passes through jit (retracing when the auxiliary data changes) and grad (gradients
// come back as the user's type, checked against finite differences), and a mcx::Tree holds it without its type.
#include <cmath>

#include "gmock/gmock.h"
#include "tests/trace/trace_test_util.h"

namespace custom_node_test {

// A layer: two arrays and a static activation name.
struct Linear {
  mcx::Array w, b;
  std::string activation = "tanh";
};

// A type with no auxiliary data and a nested pytree child.
struct Stack {
  std::vector<Linear> layers;
  mcx::Array scale;
};

// A different type claiming Linear's name (refused).
struct Impostor {
  mcx::Array x;
};

}  // namespace custom_node_test

template <>
struct mcx::PyTreeNode<custom_node_test::Linear> {
  static constexpr std::string_view name = "test.Linear";
  static auto children(const custom_node_test::Linear& l) { return std::tuple(l.w, l.b); }
  static std::string aux(const custom_node_test::Linear& l) { return l.activation; }
  static custom_node_test::Linear build(std::string_view aux, std::tuple<Array, Array> c) {
    return {std::get<0>(c), std::get<1>(c), std::string(aux)};
  }
};

template <>
struct mcx::PyTreeNode<custom_node_test::Stack> {
  static constexpr std::string_view name = "test.Stack";
  static auto children(const custom_node_test::Stack& s) { return std::tuple(s.layers, s.scale); }
  static custom_node_test::Stack build(std::string_view, std::tuple<std::vector<custom_node_test::Linear>, Array> c) {
    return {std::get<0>(c), std::get<1>(c)};
  }
};

template <>
struct mcx::PyTreeNode<custom_node_test::Impostor> {
  static constexpr std::string_view name = "test.Linear";
  static auto children(const custom_node_test::Impostor& i) { return std::tuple(i.x); }
  static custom_node_test::Impostor build(std::string_view, std::tuple<Array> c) { return {std::get<0>(c)}; }
};

namespace mcx {
namespace {

using custom_node_test::Impostor;
using custom_node_test::Linear;
using custom_node_test::Stack;
using ::testing::HasSubstr;
using testing_util::error_of;

Linear layer(float scale, std::string activation = "tanh") {
  return {array<float>({0.5f * scale, -1.0f * scale, 0.25f * scale, 2.0f * scale}, {2, 2}),
          array<float>({0.1f, -0.2f}, {2}), std::move(activation)};
}

Array apply_layer(const Linear& l, const Array& x) {
  Array y = matmul(x, l.w) + l.b;
  return l.activation == "tanh" ? tanh(y) : relu(y);
}

TEST(CustomNode, FlattensToItsChildrenAndKeepsItsAuxiliaryData) {
  const Linear l = layer(1, "relu");
  auto [leaves, def] = tree_flatten(l);
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_EQ(leaves[0].impl(), l.w.impl());
  EXPECT_EQ(def.kind(), TreeDef::Kind::kCustom);
  EXPECT_EQ(def.custom_name(), "test.Linear");
  EXPECT_EQ(def.aux(), "relu");
  EXPECT_EQ(def.to_string(), "test.Linear[\"relu\"](*, *)");
  EXPECT_EQ(def.leaf_paths(), (std::vector<std::string>{"[0]", "[1]"}));
  const Linear back = tree_unflatten<Linear>(def, leaves);
  EXPECT_EQ(back.activation, "relu");
  EXPECT_EQ(back.b.impl(), l.b.impl());
  // The auxiliary data is part of the structure; binary bytes print escaped.
  EXPECT_NE(tree_structure(layer(1, "relu")), tree_structure(layer(1, "tanh")));
  EXPECT_EQ(tree_structure(layer(1, "relu")), tree_structure(layer(2, "relu")));
  EXPECT_EQ(tree_structure(Linear{l.w, l.b, std::string("a\0\"b", 4)}).to_string(),
            "test.Linear[\"a\\x00\\\"b\"](*, *)");
}

TEST(CustomNode, NestsInsideAndAroundOtherPytrees) {
  const Stack s{{layer(1), layer(2, "relu")}, array<float>({3.0f}, {1})};
  auto [leaves, def] = tree_flatten(std::map<std::string, Stack>{{"net", s}});
  EXPECT_EQ(leaves.size(), 5u);
  EXPECT_EQ(def.to_string(),
            "dict{net: test.Stack[\"\"](list[test.Linear[\"tanh\"](*, *), test.Linear[\"relu\"](*, *)], *)}");
  EXPECT_EQ(def.leaf_paths()[3], "['net'][0][1][1]");
  const auto back = tree_unflatten<std::map<std::string, Stack>>(def, leaves);
  EXPECT_EQ(back.at("net").layers[1].activation, "relu");
  EXPECT_EQ(back.at("net").scale.impl(), s.scale.impl());
  // tree_map keeps the type and its auxiliary data.
  const Stack doubled = tree_map([](const Array& a) { return a * 2.0f; }, s);
  EXPECT_EQ(doubled.layers[1].activation, "relu");
  testing_util::expect_allclose(doubled.scale, {6.0});
}

TEST(CustomNode, ADynamicTreeHoldsItWithoutItsType) {
  const Linear l = layer(1, "relu");
  auto [leaves, def] = tree_flatten(l);
  const Tree t = tree_unflatten<Tree>(def, leaves);
  ASSERT_TRUE(t.is_custom());
  EXPECT_EQ(t.custom().name, "test.Linear");
  EXPECT_EQ(t.custom().aux, "relu");
  EXPECT_EQ(t.custom().children.at(1).array().impl(), l.b.impl());
  EXPECT_EQ(tree_structure(t), def);  // the same structure either way
  // ... and the type is rebuilt from it.
  auto [tleaves, tdef] = tree_flatten(t);
  EXPECT_EQ(tree_unflatten<Linear>(tdef, tleaves).activation, "relu");
  EXPECT_THAT(error_of([&] { (void)t.dict(); }), HasSubstr("expected a dict, found a custom node"));
}

TEST(CustomNode, WrongStructuresAndNamesAreRefused) {
  auto [leaves, def] = tree_flatten(std::vector<Array>{layer(1).w, layer(1).b});
  EXPECT_THAT(error_of([&] { (void)tree_unflatten<Linear>(def, leaves); }),
              HasSubstr("expected the custom node test.Linear, found structure list[*, *]"));
  auto [sl, sdef] = tree_flatten(Stack{{}, layer(1).b});
  EXPECT_THAT(error_of([&] { (void)tree_unflatten<Linear>(sdef, sl); }), HasSubstr("found structure test.Stack"));
  (void)tree_structure(layer(1));
  EXPECT_THAT(error_of([&] { (void)tree_structure(Impostor{layer(1).b}); }),
              HasSubstr("two custom node types are named 'test.Linear'"));
  EXPECT_THAT(error_of([&] { (void)TreeDef::custom("has space", "", {}); }),
              HasSubstr("letters, digits and '._:-'"));
}

TEST(CustomNode, JitRetracesWhenTheAuxiliaryDataChanges) {
  auto f = jit([](const Linear& l, const Array& x) { return apply_layer(l, x); });
  const Array x = array<float>({1.0f, -2.0f}, {1, 2});
  const Array tanh_out = f(layer(1), x);
  EXPECT_EQ(f.cache_size(), 1);
  (void)f(layer(3), x);  // same structure: no retrace
  EXPECT_EQ(f.cache_size(), 1);
  const Array relu_out = f(layer(1, "relu"), x);
  EXPECT_EQ(f.cache_size(), 2);
  testing_util::expect_same_values(tanh_out, apply_layer(layer(1), x));
  testing_util::expect_same_values(relu_out, apply_layer(layer(1, "relu"), x));
}

TEST(CustomNode, GradientsComeBackAsTheUsersTypeAndMatchFiniteDifferences) {
  const Array x = array<float>({0.3f, -0.7f, 1.1f, 0.2f}, {2, 2});
  auto loss = [&](const Linear& l) { return sum(apply_layer(l, x) * apply_layer(l, x)); };
  const Linear l = layer(0.5f);
  const Linear g = grad(loss)(l);
  EXPECT_EQ(g.activation, "tanh");
  // Central differences in double on each weight.
  const std::vector<double> w = l.w.to_host().to_doubles(), b = l.b.to_host().to_doubles();
  const std::vector<double> xs = x.to_host().to_doubles();
  auto reference = [&](const std::vector<double>& wv, const std::vector<double>& bv) {
    double total = 0;
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 2; ++c) {
        const double y = std::tanh(xs[r * 2] * wv[c] + xs[r * 2 + 1] * wv[2 + c] + bv[c]);
        total += y * y;
      }
    }
    return total;
  };
  std::vector<double> gw, gb;
  const double h = 1e-6;
  for (size_t i = 0; i < w.size(); ++i) {
    std::vector<double> up = w, down = w;
    up[i] += h;
    down[i] -= h;
    gw.push_back((reference(up, b) - reference(down, b)) / (2 * h));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    std::vector<double> up = b, down = b;
    up[i] += h;
    down[i] -= h;
    gb.push_back((reference(w, up) - reference(w, down)) / (2 * h));
  }
  testing_util::expect_allclose(g.w, gw, 1e-4, 1e-5);
  testing_util::expect_allclose(g.b, gb, 1e-4, 1e-5);
}

}  // namespace
}  // namespace mcx
