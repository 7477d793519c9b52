// Custom pytree nodes in exported artifacts (JAX's register_pytree_node_serialization): an argument and a
// result of the user's types survive serialize/deserialize with their names and auxiliary bytes, calls check
// the argument's structure (auxiliary data included), call_as rebuilds the result type, and the artifact's
// min_reader_version says which readers may read it.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/mcx.h"
#include "mcx/trace/export.h"
#include "tests/trace/trace_test_util.h"

namespace export_custom_node_test {

struct Dense {
  mcx::Array w, b;
  std::string activation;
};

struct Prediction {
  mcx::Array logits, probabilities;
  int version = 0;  // auxiliary data, stored as its decimal text
};

}  // namespace export_custom_node_test

template <>
struct mcx::PyTreeNode<export_custom_node_test::Dense> {
  static constexpr std::string_view name = "export_test.Dense";
  static auto children(const export_custom_node_test::Dense& d) { return std::tuple(d.w, d.b); }
  static std::string aux(const export_custom_node_test::Dense& d) { return d.activation; }
  static export_custom_node_test::Dense build(std::string_view aux, std::tuple<Array, Array> c) {
    return {std::get<0>(c), std::get<1>(c), std::string(aux)};
  }
};

template <>
struct mcx::PyTreeNode<export_custom_node_test::Prediction> {
  static constexpr std::string_view name = "export_test.Prediction";
  static auto children(const export_custom_node_test::Prediction& p) {
    return std::tuple(p.logits, p.probabilities);
  }
  static std::string aux(const export_custom_node_test::Prediction& p) { return std::to_string(p.version); }
  static export_custom_node_test::Prediction build(std::string_view aux, std::tuple<Array, Array> c) {
    return {std::get<0>(c), std::get<1>(c), std::stoi(std::string(aux))};
  }
};

namespace mcx {
namespace {

using export_custom_node_test::Dense;
using export_custom_node_test::Prediction;
using ::testing::HasSubstr;
using testing_util::error_of;
using testing_util::expect_same_values;
using testing_util::random_array;

Dense dense(uint64_t seed, std::string activation = "relu") {
  return {random_array({4, 3}, seed), random_array({3}, seed + 1), std::move(activation)};
}

Prediction predict(const Dense& d, const Array& x) {
  Array logits = matmul(x, d.w) + d.b;
  if (d.activation == "relu") logits = relu(logits);
  return {logits, softmax(logits, -1), 3};
}

Exported export_predict() {
  return export_fn(predict, {.name = "predict", .creation_time_unix_ms = 1})(
      dense(1), AbstractValue{DType::kFloat32, symbolic_shape("b, 4")});
}

TEST(CustomNodeExport, ArgumentsAndResultsKeepTheirTypesThroughSerialization) {
  const Exported back = Exported::deserialize(export_predict().serialize());
  EXPECT_EQ(back.artifact().in_tree.to_string(), "tuple(export_test.Dense[\"relu\"](*, *), *)");
  EXPECT_EQ(back.artifact().out_tree.to_string(), "export_test.Prediction[\"3\"](*, *)");
  EXPECT_EQ(back.artifact().in_names, (std::vector<std::string>{"args[0][0]", "args[0][1]", "args[1]"}));
  const Dense d = dense(7);
  const Array x = random_array({5, 4}, 9);
  const Prediction p = back.call_as<Prediction>(d, x);
  EXPECT_EQ(p.version, 3);
  const Prediction expected = predict(d, x);
  expect_same_values(p.logits, expected.logits);
  expect_same_values(p.probabilities, expected.probabilities);
  // Without the type: a Tree::Custom with the name and bytes.
  const Tree t = back.call_tree(d, x);
  ASSERT_TRUE(t.is_custom());
  EXPECT_EQ(t.custom().name, "export_test.Prediction");
  EXPECT_EQ(t.custom().aux, "3");
  expect_same_values(t.custom().children.at(1).array(), expected.probabilities);
}

TEST(CustomNodeExport, CallsCheckTheNodeAndItsAuxiliaryData) {
  const Exported e = export_predict();
  const Array x = random_array({2, 4}, 3);
  EXPECT_THAT(error_of([&] { (void)e.call(dense(2, "tanh"), x); }),
              HasSubstr("the arguments have structure tuple(export_test.Dense[\"tanh\"](*, *), *), but the function "
                        "was exported for tuple(export_test.Dense[\"relu\"](*, *), *)"));
  EXPECT_THAT(error_of([&] { (void)e.call(std::make_tuple(dense(2).w, dense(2).b), x); }),
              HasSubstr("the arguments have structure tuple(tuple(*, *), *)"));
  EXPECT_THAT(error_of([&] { (void)e.call_as<Dense>(dense(2), x); }),
              HasSubstr("expected the custom node export_test.Dense, found structure export_test.Prediction"));
}

TEST(CustomNodeExport, OnlyArtifactsWithCustomNodesNeedAFormatTwoReader) {
  auto with = exporting::deserialize(export_predict().serialize());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->min_reader_version, exporting::kCustomTreeNodesVersion);
  auto without = exporting::deserialize(
      export_fn([](const Array& x) { return x * 2.0f; }, {.name = "twice"})(random_array({3}, 1)).serialize());
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->min_reader_version, 1u);
}

TEST(CustomNodeExport, MalformedCustomNodesAreRefusedWhenRead) {
  exporting::Artifact a = export_predict().artifact();
  a.out_tree.custom_name = "not a name";
  auto bad_name = exporting::deserialize(value_or_throw(exporting::serialize(a)));
  EXPECT_THAT(bad_name.status().message(), HasSubstr("a custom node's name must be 1 to 256 letters, digits and '._:-'"));
  a.out_tree.custom_name = "export_test.Prediction";
  a.out_tree.aux = std::string(2000, 'x');
  exporting::Limits small;
  small.max_custom_node_aux = 1000;
  auto big = exporting::deserialize(value_or_throw(exporting::serialize(a)), small);
  EXPECT_THAT(big.status().message(), HasSubstr("has 2000 bytes of auxiliary data (limit 1000)"));
}

}  // namespace
}  // namespace mcx
