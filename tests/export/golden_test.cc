// Golden artifacts: files under tests/data/export/ written by earlier format versions (v<N>_*.mcx) must be
// read, and must compute the same values, by every later build (docs/compatibility.md). They are never
// rewritten: a new format version adds new files beside them.
//
// To (re)create the files of the CURRENT format version only (e.g. when bumping kFormatVersion):
//   MCX_WRITE_GOLDEN=1 ./mcx_export_tests --gtest_filter='Golden.Write*'
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/npy.h"
#include "mcx/ir/text.h"
#include "mcx/mcx.h"
#include "mcx/ir/passes.h"
#include "mcx/trace/export.h"
#include "tests/ir/ir_test_programs.h"
#include "tests/trace/trace_test_util.h"

namespace golden_test {
// A layer as a custom pytree node (format version 2 records its name and auxiliary bytes).
struct Layer {
  mcx::Array w, b;
  std::string activation;
};
}  // namespace golden_test

template <>
struct mcx::PyTreeNode<golden_test::Layer> {
  static constexpr std::string_view name = "golden.Layer";
  static auto children(const golden_test::Layer& l) { return std::tuple(l.w, l.b); }
  static std::string aux(const golden_test::Layer& l) { return l.activation; }
  static golden_test::Layer build(std::string_view aux, std::tuple<Array, Array> c) {
    return {std::get<0>(c), std::get<1>(c), std::string(aux)};
  }
};

namespace mcx {
namespace {

namespace fs = std::filesystem;
using golden_test::Layer;
using testing_util::expect_allclose;

const fs::path kDir = MCX_EXPORT_GOLDEN_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

// Deterministic values independent of any RNG implementation.
Array ramp(std::vector<int64_t> dims, double scale, double offset) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(scale * static_cast<double>(i) + offset));
  return array(v, dims);
}

// The model exported into v1_mlp.mcx: weights captured as constants, symbolic batch b, input f32[b,6].
Array golden_mlp(const Array& x) {
  Array h = relu(matmul(x, ramp({6, 5}, 0.7, 0.1)) + ramp({5}, 1.3, 0.2));
  return softmax(matmul(h, ramp({5, 3}, 0.9, 0.3)), -1);
}

bool writing() { return std::getenv("MCX_WRITE_GOLDEN") != nullptr; }

// The function exported into v2_custom_node.mcx: a custom node in and out.
Layer golden_layer(const Layer& l, const Array& x) { return {tanh(matmul(x, l.w) + l.b), softmax(l.b, -1), l.activation + "+"}; }
Layer golden_layer_params() { return {ramp({6, 5}, 0.4, 0.3), ramp({5}, 1.1, 0.7), "tanh"}; }

TEST(Golden, WriteCurrentVersion) {
  if (!writing()) GTEST_SKIP() << "set MCX_WRITE_GOLDEN=1 to write the golden files of format version "
                               << exporting::kFormatVersion;
  const std::string v = "v" + std::to_string(exporting::kFormatVersion) + "_";
  // Golden files are history: never overwrite the ones a format version already wrote.
  if (fs::exists(kDir / (v + "mlp.mcx"))) GTEST_SKIP() << (kDir / (v + "mlp.mcx")) << " exists; not overwritten";
  Exported e = export_fn(golden_mlp, {.name = "golden_mlp", .constraints = {"b >= 1"}, .creation_time_unix_ms = 0})(
      AbstractValue{DType::kFloat32, symbolic_shape("b, 6")});
  write(kDir / (v + "mlp.mcx"), e.serialize());
  Array x = ramp({4, 6}, 0.37, 0.5);
  throw_if_error(write_npy((kDir / (v + "mlp_x.npy")).string(), x.to_host()));
  throw_if_error(write_npy((kDir / (v + "mlp_y.npy")).string(), golden_mlp(x).to_host()));
  ir::Program all = ir::testing_programs::all_ops_program();
  write(kDir / (v + "all_ops.mcx"), value_or_throw(exporting::serialize(exporting::make_artifact(all, "all_ops", 0))));
  write(kDir / (v + "all_ops.txt"), ir::print_program(all));
  // Format 2: custom pytree nodes in the signature.
  Exported layer = export_fn(golden_layer, {.name = "golden_layer", .creation_time_unix_ms = 0})(
      golden_layer_params(), AbstractValue{DType::kFloat32, symbolic_shape("b, 6")});
  write(kDir / (v + "custom_node.mcx"), layer.serialize());
}

// The same model exported for 4 devices, the batch split over "data" (v1_sharded_mlp.mcx, added to format
// version 1 with sharded execution of artifacts; written once, like the others).
Exported export_sharded_golden_mlp() {
  const exporting::ShardingSpec rows{false, {"data"}, {4}, {{"data"}}};
  return export_fn(golden_mlp, {.name = "golden_sharded_mlp", .constraints = {"b >= 1"}, .in_shardings = {rows},
                                .out_shardings = {rows}, .nr_devices = 4, .creation_time_unix_ms = 0})(
      AbstractValue{DType::kFloat32, symbolic_shape("b, 6")});
}

TEST(Golden, WriteShardedMlp) {
  if (!writing()) GTEST_SKIP() << "set MCX_WRITE_GOLDEN=1 to write v1_sharded_mlp.mcx";
  if (fs::exists(kDir / "v1_sharded_mlp.mcx")) GTEST_SKIP() << "v1_sharded_mlp.mcx exists; not overwritten";
  ASSERT_EQ(exporting::kFormatVersion, 1u);
  write(kDir / "v1_sharded_mlp.mcx", export_sharded_golden_mlp().serialize());
}

TEST(Golden, V1ShardedMlpRunsOnFourDevices) {
  Exported e = Exported::deserialize(read(kDir / "v1_sharded_mlp.mcx"));
  EXPECT_EQ(e.artifact().nr_devices, 4u);
  EXPECT_EQ(e.artifact().in_shardings.at(0).to_string(), "{data: 4} P('data')");
  Array x(value_or_throw(read_npy((kDir / "v1_mlp_x.npy").string())));
  Buffer y = value_or_throw(read_npy((kDir / "v1_mlp_y.npy").string()));
  Array out = e.call(x)[0];
  EXPECT_EQ(out.sharding().num_devices(), 4);
  expect_allclose(out, y.to_doubles(), 1e-5, 1e-6);
}

TEST(Golden, EveryFormatVersionFileIsRead) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kDir)) {
    if (entry.path().extension() != ".mcx") continue;
    ++files;
    auto a = exporting::deserialize(read(entry.path()));
    ASSERT_TRUE(a.ok()) << entry.path().filename() << ": " << a.status();
    EXPECT_LE(a->min_reader_version, exporting::kFormatVersion);
  }
  EXPECT_GE(files, 2) << "golden artifacts missing in " << kDir;
}

TEST(Golden, V1MlpComputesTheRecordedValues) {
  Exported e = Exported::deserialize(read(kDir / "v1_mlp.mcx"));
  EXPECT_EQ(e.artifact().format_version, 1u);
  EXPECT_EQ(e.artifact().in_avals[0].to_string(), "f32[b,6]");
  EXPECT_EQ(e.artifact().constraints, std::vector<std::string>{"b >= 1"});
  Array x(value_or_throw(read_npy((kDir / "v1_mlp_x.npy").string())));
  Buffer y = value_or_throw(read_npy((kDir / "v1_mlp_y.npy").string()));
  expect_allclose(e.call(x)[0], y.to_doubles(), 1e-5, 1e-6);
  // Any batch size, against today's computation of the same model.
  Array x7 = ramp({7, 6}, 0.21, 0.9);
  expect_allclose(e.call(x7)[0], golden_mlp(x7).to_host().to_doubles(), 1e-5, 1e-6);
  // Its VJP: cotangent of ones over a softmax gives zero input gradient (rows sum to one).
  ASSERT_TRUE(e.has_vjp());
  std::vector<Array> g = e.vjp().call_flat({x7, ones({7, 3}, DType::kFloat32)});
  expect_allclose(g[0], std::vector<double>(42, 0.0), 1e-5, 1e-5);
}

TEST(Golden, V2MlpComputesTheRecordedValues) {
  Exported e = Exported::deserialize(read(kDir / "v2_mlp.mcx"));
  EXPECT_EQ(e.artifact().format_version, 2u);
  EXPECT_EQ(e.artifact().min_reader_version, 1u);  // no custom nodes: format 1 readers may read it
  Array x(value_or_throw(read_npy((kDir / "v2_mlp_x.npy").string())));
  Buffer y = value_or_throw(read_npy((kDir / "v2_mlp_y.npy").string()));
  expect_allclose(e.call(x)[0], y.to_doubles(), 1e-5, 1e-6);
}

TEST(Golden, V2CustomNodeRebuildsTheLayer) {
  Exported e = Exported::deserialize(read(kDir / "v2_custom_node.mcx"));
  EXPECT_EQ(e.artifact().min_reader_version, 2u);
  EXPECT_EQ(e.artifact().out_tree.to_string(), "golden.Layer[\"tanh+\"](*, *)");
  const Array x = ramp({3, 6}, 0.21, 0.9);
  const Layer out = e.call_as<Layer>(golden_layer_params(), x);
  const Layer expected = golden_layer(golden_layer_params(), x);
  EXPECT_EQ(out.activation, "tanh+");
  expect_allclose(out.w, expected.w.to_host().to_doubles(), 1e-5, 1e-6);
  expect_allclose(out.b, expected.b.to_host().to_doubles(), 1e-5, 1e-6);
}

TEST(Golden, V1AllOpsDecodesToTheRecordedProgram) {
  auto a = value_or_throw(exporting::deserialize(read(kDir / "v1_all_ops.mcx")));
  EXPECT_EQ(ir::print_program(a.program), read(kDir / "v1_all_ops.txt"));
  EXPECT_EQ(a.constraints, (std::vector<std::string>{"b >= 2", "max(b, c) <= 4096"}));
}

}  // namespace
}  // namespace mcx
