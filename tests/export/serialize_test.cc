// Serialization of export artifacts: round trips of every op and of symbolic programs, versions and their
// errors, corrupt and truncated inputs.
#include <cstring>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/export/artifact.h"
#include "mcx/export/exported_generated.h"
#include "mcx/export/program_codec.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/text.h"
#include "tests/export/export_test_util.h"
#include "tests/ir/ir_test_programs.h"
#include "tests/support/test_util.h"

namespace mcx::exporting {
namespace {

using ::testing::HasSubstr;
using ir::testing_programs::all_ops_program;
using ir::testing_programs::kinds_used;

absl::Status codec_check(std::string_view text, const Limits& limits) {
  return codec::check_dim_text(text, limits, "test");
}

TEST(Serialize, EveryOpRoundTrips) {
  ir::Program p = all_ops_program();
  auto kinds = kinds_used(p);
  for (ir::OpKind k : kinds_used(ir::testing_programs::spmd_ops_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::window_ops_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::special_ops_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::special_functions_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::remat_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::control_flow_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::custom_rules_program())) kinds.insert(k);
  for (ir::OpKind k : kinds_used(ir::testing_programs::shard_map_program())) kinds.insert(k);
  ASSERT_EQ(kinds.size(), static_cast<size_t>(ir::kNumOpKinds))
      << "all_ops_program, spmd_ops_program (SpmdOpsRoundTrip), window_ops_program (WindowOpsRoundTrip), "
         "special_ops_program (SpecialOpsRoundTrip), special_functions_program (SpecialFunctionsRoundTrip) "
         "remat_program (RematBarrierRoundTrip), control_flow_program (ControlFlowRoundTrip) and "
         "custom_rules_program (CustomRulesRoundTrip) and shard_map_program (ShardMapRoundTrip) must use every op";
  Artifact a = make_artifact(p, "all_ops", 1234);
  std::string bytes = value_or_throw(serialize(a));
  Artifact b = value_or_throw(deserialize(bytes));
  EXPECT_TRUE(ir::structurally_equal(a.program, b.program)) << ir::print_program(b.program);
  EXPECT_EQ(ir::fingerprint_hex(a.program), ir::fingerprint_hex(b.program));
  EXPECT_EQ(ir::print_program(a.program), ir::print_program(b.program));
  EXPECT_EQ(b.constraints, (std::vector<std::string>{"b >= 2", "max(b, c) <= 4096"}));
  EXPECT_EQ(b.program.scope.constraints(), b.constraints);
  EXPECT_EQ(b.in_avals, a.in_avals);
  EXPECT_EQ(b.out_avals, a.out_avals);
  EXPECT_EQ(b.fun_name, "all_ops");
  EXPECT_EQ(b.creation_time_unix_ms, 1234);
  EXPECT_EQ(b.opset_version, static_cast<uint32_t>(ir::kOpsetVersion));
  EXPECT_EQ(b.format_version, kFormatVersion);
  EXPECT_EQ(b.min_reader_version, kMinReaderVersionWritten);
  EXPECT_EQ(b.producer, producer_string());
  // Deterministic: the same artifact serialises to the same bytes, also after a round trip.
  EXPECT_EQ(value_or_throw(serialize(b)), bytes);
}

// Round-trips p (program, fingerprint, bytes again); an artifact declaring the opset below p's cannot hold
// it, naming its newest op, on writing and on reading.
void expect_opset_round_trip(const ir::Program& p, int opset, const std::string& newest_op) {
  EXPECT_EQ(ir::required_opset(p), opset);
  Artifact a = make_artifact(p, p.name, 5);
  std::string bytes = value_or_throw(serialize(a));
  Artifact b = value_or_throw(deserialize(bytes));
  EXPECT_TRUE(ir::structurally_equal(a.program, b.program)) << ir::print_program(b.program);
  EXPECT_EQ(ir::print_program(a.program), ir::print_program(b.program));
  EXPECT_EQ(ir::fingerprint_hex(a.program), ir::fingerprint_hex(b.program));
  EXPECT_EQ(b.opset_version, static_cast<uint32_t>(ir::kOpsetVersion));  // make_artifact: this build's opset
  EXPECT_EQ(value_or_throw(serialize(b)), bytes);
  const std::string older = std::to_string(opset - 1);
  a.opset_version = static_cast<uint32_t>(opset - 1);
  EXPECT_THAT(serialize(a).status().message(),
              HasSubstr("the program uses ops of opset " + std::to_string(opset) + " (" + newest_op +
                        ") but the artifact declares opset " + older));
  auto* root = fb::GetMutableSizePrefixedExported(bytes.data());
  ASSERT_TRUE(root->mutate_opset_version(static_cast<uint32_t>(opset - 1)));
  EXPECT_THAT(deserialize(bytes).status().message(), HasSubstr("declares opset " + older));
}

// Opset 2: the SPMD ops, their integer-list attributes and the symbolic shapes they divide.
TEST(Serialize, SpmdOpsRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::spmd_ops_program(), 2, "all_reduce");
  // Opset-1 programs are still accepted under opset 1 (what an older writer produced).
  Artifact old = make_artifact(all_ops_program(), "all_ops", 0);
  old.opset_version = 1;
  EXPECT_TRUE(deserialize(value_or_throw(serialize(old))).ok());
}

// Opset 3: conv_general_dilated and reduce_window with their attributes (symbolic and negative paddings);
// programs without them keep needing the opset they did.
TEST(Serialize, WindowOpsRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::window_ops_program(), 3, "conv_general_dilated");
  EXPECT_EQ(ir::required_opset(all_ops_program()), 1);
  EXPECT_EQ(ir::required_opset(ir::testing_programs::spmd_ops_program()), 2);
}

// Opset 4: erf; programs without it keep needing the opset they did.
TEST(Serialize, SpecialOpsRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::special_ops_program(), 4, "erf");
  EXPECT_EQ(ir::required_opset(ir::testing_programs::window_ops_program()), 3);
}

// Opset 5: erfc and erf_inv; programs without them keep needing the opset they did.
TEST(Serialize, SpecialFunctionsRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::special_functions_program(), 5, "erfc");
  EXPECT_EQ(ir::required_opset(ir::testing_programs::special_ops_program()), 4);
}

TEST(Serialize, RematBarrierRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::remat_program(), 6, "remat_barrier");
}

// Opset 7: the regions survive, shared by the siblings that held them.
TEST(Serialize, ControlFlowRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::control_flow_program(), 7, "scan");
  EXPECT_EQ(ir::required_opset(ir::testing_programs::remat_program()), 6);
}

// Opset 8: custom_vjp_call and custom_jvp_call keep their rules.
TEST(Serialize, CustomRulesRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::custom_rules_program(), 8, "custom_vjp_call");
  EXPECT_EQ(ir::required_opset(ir::testing_programs::control_flow_program()), 7);
}

// Opset 9: shard_map keeps its body, mesh shape and specs; debug_print its format.
TEST(Serialize, ShardMapRoundTrip) {
  expect_opset_round_trip(ir::testing_programs::shard_map_program(), 9, "shard_map");
  EXPECT_EQ(ir::required_opset(ir::testing_programs::custom_rules_program()), 8);
}

TEST(Serialize, ConstantsOfEveryDtypeKeepTheirBits) {
  ir::ProgramBuilder b("consts");
  std::vector<ir::ValueId> outs;
  for (int t = 0; t < kNumDTypes; ++t) {
    outs.push_back(b.constant(test::random_buffer(static_cast<DType>(t), {2, 3}, 7 + t, -100, 100)));
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  outs.push_back(b.constant(Buffer::from_vector<float>({nan, -0.0f, std::numeric_limits<float>::infinity()}, {3})));
  outs.push_back(b.constant(Buffer::zeros(DType::kFloat64, {0, 5})));
  ir::Program p = std::move(b).build(outs);
  Artifact back = value_or_throw(deserialize(value_or_throw(serialize(make_artifact(p, "consts")))));
  ASSERT_EQ(back.program.instrs.size(), p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    Buffer want = value_or_throw(p.instrs[i].attrs.get_buffer("value"));
    Buffer got = value_or_throw(back.program.instrs[i].attrs.get_buffer("value"));
    EXPECT_TRUE(got.bitwise_equal(want)) << i << ": " << got.to_string() << " vs " << want.to_string();
  }
}

TEST(Serialize, SignatureShardingsAndMetadataRoundTrip) {
  Artifact a = make_artifact(value_or_throw(ir::parse_program(R"(
program @f(%x: f32[b,784], %w: f32[784,10]) -> (f32[b,10]) {
  %y = dot_general(%x, %w) {lhs_batch=[], lhs_contracting=[1], rhs_batch=[], rhs_contracting=[0]} : f32[b,10]
  return (%y)
})")),
                             "predict");
  a.in_names = {"args[0]", "args[1]['w']"};
  a.in_tree = TreeSpec{TreeSpec::Kind::kTuple, {}, {TreeSpec{}, TreeSpec{TreeSpec::Kind::kDict, {"w"}, {TreeSpec{}}}}};
  a.out_tree = TreeSpec{};
  a.nr_devices = 8;
  ShardingSpec s;
  s.unspecified = false;
  s.mesh_axis_names = {"data", "model"};
  s.mesh_axis_sizes = {2, 4};
  s.spec = {{"data"}, {}};
  a.in_shardings[0] = s;
  s.spec = {{}, {"data", "model"}};
  a.in_shardings[1] = s;
  a.platforms = {"cpu", "cuda"};
  a.disabled_safety_checks = {"platform"};
  Artifact b = value_or_throw(deserialize(value_or_throw(serialize(a))));
  EXPECT_EQ(b.in_names, a.in_names);
  EXPECT_EQ(b.in_tree, a.in_tree);
  EXPECT_EQ(b.in_tree.to_string(), "tuple(*, dict{w: *})");
  EXPECT_EQ(b.out_tree, a.out_tree);
  EXPECT_EQ(b.in_shardings, a.in_shardings);
  EXPECT_EQ(b.in_shardings[1].to_string(), "{data: 2, model: 4} P(None, ('data', 'model'))");
  EXPECT_TRUE(b.out_shardings[0].unspecified);
  EXPECT_EQ(b.nr_devices, 8u);
  EXPECT_EQ(b.platforms, a.platforms);
  EXPECT_EQ(b.disabled_safety_checks, a.disabled_safety_checks);
  EXPECT_EQ(b.dim_vars(), std::vector<std::string>{"b"});
  std::string text = describe(b);
  EXPECT_THAT(text, HasSubstr("args[1]['w']: f32[784,10]"));
  EXPECT_THAT(text, HasSubstr("P('data', None)"));
  EXPECT_THAT(text, HasSubstr("platforms: cpu, cuda"));
}

TEST(Serialize, ValidateRejectsInconsistentArtifacts) {
  Artifact a = testutil::mlp_artifact(2);
  a.in_names.pop_back();
  EXPECT_THAT(serialize(a).status().message(), HasSubstr("input names"));
  a = testutil::mlp_artifact(2);
  ShardingSpec s{false, {"x"}, {4}, {{"y"}}};
  a.in_shardings[0] = s;
  EXPECT_THAT(serialize(a).status().message(), HasSubstr("names mesh axis 'y' that the mesh lacks"));
  a = testutil::mlp_artifact(2);
  a.opset_version = ir::kOpsetVersion + 1;
  EXPECT_THAT(serialize(a).status().message(), HasSubstr("opset version"));
}

// ---- versions ------------------------------------------------------------------------------------

// Rewrites one scalar field of the root table in place (FlatBuffers mutation needs the field present).
std::string with_versions(const Artifact& a, uint32_t format, uint32_t min_reader, uint32_t opset, uint32_t cc) {
  std::string bytes = value_or_throw(serialize(a));
  auto* root = fb::GetMutableSizePrefixedExported(bytes.data());
  EXPECT_TRUE(root->mutate_format_version(format));
  EXPECT_TRUE(root->mutate_min_reader_version(min_reader));
  EXPECT_TRUE(root->mutate_opset_version(opset));
  EXPECT_TRUE(root->mutate_calling_convention_version(cc));
  return bytes;
}

TEST(Versions, NewerWriterReadableWhenMinReaderVersionAllows) {
  // A future writer (format 7) that declares version-1 readers can read it: accepted.
  Artifact a = testutil::mlp_artifact(2);
  Artifact b = value_or_throw(deserialize(with_versions(a, 7, 1, ir::kOpsetVersion, 1)));
  EXPECT_EQ(b.format_version, 7u);
}

TEST(Versions, MinReaderVersionAboveOursIsRejectedNamingBoth) {
  Artifact a = testutil::mlp_artifact(2);
  auto r = deserialize(with_versions(a, kFormatVersion + 2, kFormatVersion + 1, ir::kOpsetVersion, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("needs a reader of format version >= " + std::to_string(kFormatVersion + 1)));
  EXPECT_THAT(r.status().message(), HasSubstr("this reader implements format version " + std::to_string(kFormatVersion)));
  EXPECT_THAT(r.status().message(), HasSubstr("mcx 0.1.0"));
}

TEST(Versions, OpsetAndCallingConventionOutOfRangeAreRejected) {
  Artifact a = testutil::mlp_artifact(2);
  auto r = deserialize(with_versions(a, 1, 1, ir::kOpsetVersion + 1, 1));
  EXPECT_THAT(r.status().message(), HasSubstr("opset version " + std::to_string(ir::kOpsetVersion + 1) +
                                              "; this reader implements opsets 1.." +
                                              std::to_string(ir::kOpsetVersion)));
  r = deserialize(with_versions(a, 1, 1, 0, 1));
  EXPECT_THAT(r.status().message(), HasSubstr("opset version 0"));
  r = deserialize(with_versions(a, 1, 1, ir::kOpsetVersion, 9));
  EXPECT_THAT(r.status().message(), HasSubstr("calling convention version 9"));
  r = deserialize(with_versions(a, 1, 0, ir::kOpsetVersion, 1));
  EXPECT_THAT(r.status().message(), HasSubstr("inconsistent versions"));
}

// ---- corrupt inputs ------------------------------------------------------------------------------

TEST(Corrupt, NotAnArtifact) {
  EXPECT_THAT(deserialize(std::string_view("")).status().message(), HasSubstr("not an mcx export artifact"));
  EXPECT_THAT(deserialize(std::string_view("hello world, this is text")).status().message(),
              HasSubstr("expected the identifier 'MCXE' at offset 8"));
}

TEST(Corrupt, EveryTruncationIsAnError) {
  std::string bytes = value_or_throw(serialize(testutil::mlp_artifact(2)));
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = deserialize(std::string_view(bytes.data(), n));
    ASSERT_FALSE(r.ok()) << "truncated to " << n << " of " << bytes.size() << " bytes was accepted";
    EXPECT_THAT(r.status().message(), HasSubstr("[deserialize]"));
  }
}

TEST(Corrupt, RandomBitFlipsNeverCrash) {
  std::string bytes = value_or_throw(serialize(make_artifact(all_ops_program(), "all_ops")));
  std::mt19937_64 rng(42);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string b = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<char>(1u << (rng() % 8));
    auto r = deserialize(b);
    if (r.ok()) {
      ++accepted;  // a flip in data (constants, names) may leave a valid artifact: it must be consistent
      EXPECT_TRUE(validate(*r).ok());
      EXPECT_TRUE(serialize(*r).ok());
    } else {
      ++rejected;
      EXPECT_THAT(r.status().message(), HasSubstr("[deserialize]"));
    }
  }
  EXPECT_GT(rejected, 100);
  RecordProperty("accepted", accepted);
}

TEST(Corrupt, RandomBytesAfterTheIdentifierAreRejected) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string b(12 + rng() % 512, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    b.replace(8, 4, "MCXE");
    uint32_t n = static_cast<uint32_t>(b.size() - 4);
    std::memcpy(b.data(), &n, 4);  // a consistent size prefix, so the verifier itself is exercised
    auto r = deserialize(b);
    EXPECT_FALSE(r.ok());
  }
}

TEST(Limits, HugeExponentsAndLongExpressionsAreRejectedBeforeParsing) {
  Limits limits;
  EXPECT_TRUE(codec_check("b^2 + c^3", limits).ok());
  EXPECT_THAT(codec_check("(a + b + c + d + e + f + g + h)^9", limits).message(), HasSubstr("exponents"));
  EXPECT_THAT(codec_check("(a+b)**5 * (a+b)**5", limits).message(), HasSubstr("exponents"));
  EXPECT_THAT(codec_check(std::string(300, 'b'), limits).message(), HasSubstr("exceeds the limit 256"));
  EXPECT_TRUE(codec_check("b2 + 1099511627776", limits).ok());
  EXPECT_THAT(codec_check("1099511627777*b", limits).message(), HasSubstr("integer literal"));
  EXPECT_THAT(codec_check("99999999999999999999999", limits).message(), HasSubstr("integer literal"));
}

TEST(Limits, ArtifactLargerThanTheLimitIsRejected) {
  std::string bytes = value_or_throw(serialize(testutil::mlp_artifact(2)));
  Limits small;
  small.max_bytes = bytes.size() - 1;
  EXPECT_THAT(deserialize(bytes, small).status().message(), HasSubstr("exceeds the limit"));
  EXPECT_THAT(deserialize(bytes + "x").status().message(), HasSubstr("declares " + std::to_string(bytes.size()) +
                                                                     " bytes, found " + std::to_string(bytes.size() + 1)));
  EXPECT_TRUE(deserialize(bytes).ok());
}

TEST(Limits, HugeStaticTypesAreRejected) {
  ir::ProgramBuilder b("big");
  ir::ValueId x = b.add_parameter({DType::kFloat32, concrete_shape({int64_t{1} << 21, int64_t{1} << 21})});
  std::string bytes = value_or_throw(serialize(make_artifact(std::move(b).build({x}), "big")));
  EXPECT_THAT(deserialize(bytes).status().message(), HasSubstr("exceeds the limit of 1099511627776 elements"));
  Limits generous;
  generous.max_static_elements = int64_t{1} << 42;
  EXPECT_TRUE(deserialize(bytes, generous).ok());
}

TEST(Limits, UnalignedInputIsCopiedNotMisread) {
  std::string bytes = value_or_throw(serialize(testutil::mlp_artifact(2)));
  std::string shifted = "x" + bytes;
  auto r = deserialize(std::string_view(shifted).substr(1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(ir::structurally_equal(r->program, testutil::mlp_artifact(2).program));
}

}  // namespace
}  // namespace mcx::exporting
