// CheckpointManager in one process with 8 CPU devices (no initialize): round trips of sharded, replicated and
// partially replicated leaves, every resharding on restore bit for bit, retention, partial saves ignored and
// cleaned, async saves and their errors, and every corruption named in the error.
#include "mcx/checkpoint/checkpoint_manager.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/hash.h"
#include "mcx/mcx.h"
#include "tests/support/test_util.h"

namespace mcx::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempRoot {
 public:
  TempRoot() {
    path_ = (fs::temp_directory_path() / ("mcx_ckpt_test_" + std::to_string(::getpid()) + "_" +
                                          std::to_string(counter_++)))
                .string();
    fs::remove_all(path_);
  }
  ~TempRoot() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

Mesh mesh_of(std::vector<int64_t> sizes, std::vector<std::string> names, int first = 0) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Device> devs(devices().begin() + first, devices().begin() + first + n);
  return make_mesh(std::move(sizes), std::move(names), std::move(devs));
}

// The test state: a sharded matrix, a replicated vector, a partially replicated matrix (split on one mesh axis,
// replicated on the other), an integer scalar and an f64 leaf.
struct State {
  Buffer w = test::random_buffer(DType::kFloat32, {16, 12}, 1);
  Buffer b = test::random_buffer(DType::kFloat32, {12}, 2);
  Buffer p = test::random_buffer(DType::kInt32, {8, 6}, 3, -1000, 1000);
  Buffer s = test::scalar_buffer(DType::kInt64, 123456789);
  Buffer e = test::random_buffer(DType::kFloat64, {6, 4}, 4);

  Tree on(const Mesh& m1, const Mesh& m2) const {
    return Tree{{"params", Tree{{"w", device_put(w, NamedSharding(m1, P("x", None)))},
                                {"b", device_put(b, NamedSharding(m1, P()))}}},
                {"opt", Tree{Tree::List{device_put(p, NamedSharding(m2, P("x", None))),
                                        device_put(e, NamedSharding(m2, P(None, "y")))}}},
                {"step", device_put(s, NamedSharding(m1, P()))}};
  }
  void expect_equal(const Tree& t) const {
    EXPECT_TRUE(device_get(t.at("params").at("w")).bitwise_equal(w));
    EXPECT_TRUE(device_get(t.at("params").at("b")).bitwise_equal(b));
    EXPECT_TRUE(device_get(t.at("opt").at(0)).bitwise_equal(p));
    EXPECT_TRUE(device_get(t.at("opt").at(1)).bitwise_equal(e));
    EXPECT_TRUE(device_get(t.at("step")).bitwise_equal(s));
  }
};

size_t count_npy(const std::string& dir) {
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(dir)) n += f.path().extension() == ".npy";
  return n;
}

TEST(Checkpoint, RoundTripWritesEachDistinctBoxOnce) {
  TempRoot root;
  State st;
  const Mesh m4 = mesh_of({4}, {"x"}), m22 = mesh_of({2, 2}, {"x", "y"});
  const Tree tree = st.on(m4, m22);
  CheckpointManager ckpt(root.path());
  ckpt.save(7, tree, R"({"step": 7, "iterator": {"offset": 512}})");
  EXPECT_EQ(ckpt.all_steps(), std::vector<int64_t>{7});
  EXPECT_EQ(ckpt.latest_step(), 7);
  // w: 4 boxes, b: 1 (replicated), p: 2 (split on x, replicated on y), e: 2, step: 1.
  EXPECT_EQ(count_npy(root.path() + "/7"), 4u + 1 + 2 + 2 + 1);
  CheckpointInfo info = ckpt.info(7);
  EXPECT_THAT(info.metadata_json, HasSubstr("\"offset\":512"));
  ASSERT_EQ(info.leaves.size(), 5u);
  EXPECT_EQ(info.leaves[0].path, "opt/0");
  EXPECT_EQ(info.leaves[2].path, "params/b");
  st.expect_equal(ckpt.restore(7, tree));
}

TEST(Checkpoint, RestoreReshardsOntoEveryMesh) {
  TempRoot root;
  State st;
  CheckpointManager ckpt(root.path());
  ckpt.save(1, st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"})));
  // Targets: other meshes, other device counts (1, 2, 3 does not divide every leaf, so 2x1 and 1x2 instead),
  // other specs, devices 4..7 instead of 0..3.
  const std::vector<std::pair<Mesh, Mesh>> targets = {
      {mesh_of({2, 2}, {"x", "y"}), mesh_of({4, 1}, {"x", "y"})},
      {mesh_of({1}, {"x"}), mesh_of({1, 1}, {"x", "y"})},
      {mesh_of({8}, {"x"}), mesh_of({2, 2}, {"x", "y"}, 4)},
      {mesh_of({2}, {"x"}, 6), mesh_of({1, 2}, {"x", "y"}, 3)},
  };
  for (const auto& [m1, m2] : targets) {
    SCOPED_TRACE(m1.to_string() + " / " + m2.to_string());
    const Tree like = st.on(m1, m2);
    const Tree got = ckpt.restore(1, like);
    st.expect_equal(got);
    EXPECT_TRUE(got.at("params").at("w").array().sharding() == like.at("params").at("w").array().sharding());
  }
  // Another spec than the saved one: w split on columns over 3 devices, e split on rows.
  Tree::Dict d;
  Tree like = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  like["params"]["w"] = device_put(st.w, NamedSharding(mesh_of({3}, {"x"}), P(None, "x")));
  like["opt"].list()[1] = device_put(st.e, NamedSharding(mesh_of({3, 2}, {"x", "y"}), P("x", "y")));
  st.expect_equal(ckpt.restore(1, like));
  // With the stored structure and one sharding for all leaves.
  st.expect_equal(ckpt.restore_tree(1, SingleDeviceSharding(devices()[5])));
}

// Abstract targets (Orbax's ShapeDtypeStructs): no arrays are made to describe where the leaves go.
TEST(Checkpoint, RestoresOntoAbstractTargets) {
  TempRoot root;
  State st;
  CheckpointManager ckpt(root.path());
  ckpt.save(1, st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"})));
  const Mesh m3 = mesh_of({3}, {"x"}), m2 = mesh_of({2}, {"x"}, 5);
  std::map<std::string, LeafTarget> targets = {
      {"params/w", {DType::kFloat32, {16, 12}, NamedSharding(m3, P(None, "x"))}},
      {"params/b", {DType::kFloat32, {12}, NamedSharding(m2, P("x"))}},
      {"opt/0", {DType::kInt32, {8, 6}, NamedSharding(m2, P(None, "x"))}},
      {"opt/1", {DType::kFloat64, {6, 4}, NamedSharding(m3, P("x", None))}},
      {"step", {DType::kInt64, {}, SingleDeviceSharding(devices()[7])}}};
  const Tree got = ckpt.restore_tree(1, targets);
  st.expect_equal(got);
  EXPECT_TRUE(got.at("params").at("w").array().sharding() == targets.at("params/w").sharding);
  EXPECT_TRUE(got.at("opt").at(0).array().sharding() == targets.at("opt/0").sharding);
  // Placed by a function of each stored leaf: matrices split on rows over 2 devices, the rest replicated.
  const Tree placed = ckpt.restore_tree(1, [&](const LeafInfo& leaf) -> Sharding {
    return NamedSharding(m2, leaf.dims.size() == 2 ? P("x", None) : P());
  });
  st.expect_equal(placed);
  EXPECT_TRUE(placed.at("opt").at(1).array().sharding() == Sharding(NamedSharding(m2, P("x", None))));
  // A wrong shape, a missing target and a target for no leaf are refused, naming them.
  targets.at("params/b").dims = {13};
  EXPECT_THROW(ckpt.restore_tree(1, targets), InvalidArgument);
  targets.at("params/b").dims = {12};
  targets.erase("step");
  targets["params/c"] = {DType::kFloat32, {1}, SingleDeviceSharding(devices()[0])};
  try {
    ckpt.restore_tree(1, targets);
    ADD_FAILURE() << "restored with a missing target";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("no target for step; targets for leaves the checkpoint lacks: params/c"));
  }
}

// A custom pytree node (a user type, here held as a Tree::Custom) is stored with its name and auxiliary bytes
// (binary bytes included) and comes back as the same node.
TEST(Checkpoint, CustomNodesKeepTheirNameAndAuxiliaryData) {
  TempRoot root;
  const Buffer w = test::random_buffer(DType::kFloat32, {4, 3}, 5), b = test::random_buffer(DType::kFloat32, {3}, 6);
  const std::string aux("relu\0\xff", 6);
  const Mesh m2 = mesh_of({2}, {"x"});
  const Tree tree = Tree{{"layer", Tree(Tree::Custom{"mylib.Linear", aux, {device_put(w, NamedSharding(m2, P("x", None))),
                                                                         device_put(b, NamedSharding(m2, P()))}})}};
  CheckpointManager ckpt(root.path());
  ckpt.save(3, tree);
  CheckpointInfo info = ckpt.info(3);
  ASSERT_EQ(info.leaves.size(), 2u);
  EXPECT_EQ(info.leaves[0].path, "layer/0");
  const Tree back = ckpt.restore_tree(3, [&](const LeafInfo&) -> Sharding { return NamedSharding(m2, P()); });
  const Tree& layer = back.at("layer");
  ASSERT_TRUE(layer.is_custom());
  EXPECT_EQ(layer.custom().name, "mylib.Linear");
  EXPECT_EQ(layer.custom().aux, aux);
  EXPECT_TRUE(device_get(layer.custom().children.at(0)).bitwise_equal(w));
  EXPECT_TRUE(device_get(layer.custom().children.at(1)).bitwise_equal(b));
  EXPECT_EQ(tree_structure(back), tree_structure(tree));
}

TEST(Checkpoint, KeepsTheLastNSteps) {
  TempRoot root;
  State st;
  const Tree tree = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager ckpt(root.path(), {.max_to_keep = 2, .timeout = std::nullopt});
  for (int64_t step : {10, 20, 30, 40}) ckpt.save(step, tree);
  // Retired before save returns; their files go on the background thread, which wait() joins.
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{30, 40}));
  ckpt.wait();
  EXPECT_FALSE(fs::exists(root.path() + "/10"));
  EXPECT_FALSE(fs::exists(root.path() + "/20"));
}

// save_in_progress is true from save_async until its write is done, never blocks, and leaves the outcome to
// wait().
TEST(Checkpoint, SaveInProgressFollowsTheBackgroundWrite) {
  TempRoot root;
  State st;
  const Tree tree = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager ckpt(root.path(), {.max_to_keep = 1, .timeout = std::nullopt});
  EXPECT_FALSE(ckpt.save_in_progress());
  ckpt.save_async(1, tree);
  // Set before save_async returns; the write (several fsyncs) takes far longer than reaching this line.
  EXPECT_TRUE(ckpt.save_in_progress());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ckpt.save_in_progress() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(ckpt.save_in_progress());
  EXPECT_EQ(ckpt.all_steps(), std::vector<int64_t>{1});  // committed by the time the flag drops
  ckpt.wait();
  ckpt.save(2, tree);
  EXPECT_FALSE(ckpt.save_in_progress());  // a synchronous save, and its retention, are not a save_async
  ckpt.wait();
  EXPECT_EQ(ckpt.all_steps(), std::vector<int64_t>{2});
  EXPECT_FALSE(fs::exists(root.path() + "/1"));
}

// durable = false runs the same protocol without fsync: the same files, manifest and checksums.
TEST(Checkpoint, NonDurableSavesRestoreTheSameValues) {
  TempRoot root;
  State st;
  const Tree tree = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager fast(root.path() + "/fast", {.max_to_keep = 1, .timeout = std::nullopt, .durable = false});
  CheckpointManager durable(root.path() + "/durable", {.timeout = std::nullopt});
  fast.save(1, tree);
  fast.save_async(2, tree);
  fast.wait();
  durable.save(2, tree);
  EXPECT_EQ(fast.all_steps(), std::vector<int64_t>{2});
  st.expect_equal(fast.restore(2, tree));
  for (const auto& e : fs::directory_iterator(root.path() + "/durable/2")) {
    const std::string name = e.path().filename().string();
    if (name == "COMMIT") continue;  // names the manifest's digest, the same for both
    std::ifstream a(e.path(), std::ios::binary), b(root.path() + "/fast/2/" + name, std::ios::binary);
    const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
    EXPECT_EQ(x, y) << name;
  }
}

TEST(Checkpoint, PartialSavesAreIgnoredAndCleanedUp) {
  TempRoot root;
  State st;
  const Tree tree = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager ckpt(root.path());
  ckpt.save(1, tree);
  // What a crash leaves: a temporary directory with some files, and a step directory whose commit marker a
  // retention delete removed.
  fs::create_directories(root.path() + "/2.tmp-deadbeef");
  std::ofstream(root.path() + "/2.tmp-deadbeef/leaf0.shard0.npy") << "partial";
  fs::create_directories(root.path() + "/0");
  EXPECT_EQ(ckpt.all_steps(), std::vector<int64_t>{1});
  EXPECT_EQ(ckpt.latest_step(), 1);
  try {
    ckpt.restore(2, tree);
    ADD_FAILURE() << "restore of a partial step did not throw";
  } catch (const NotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("step 2 is not a committed checkpoint"));
    EXPECT_THAT(e.what(), HasSubstr("committed steps: [1]"));
  }
  ckpt.save(2, tree);
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(fs::exists(root.path() + "/2.tmp-deadbeef"));
  EXPECT_FALSE(fs::exists(root.path() + "/0"));
  st.expect_equal(ckpt.restore(2, tree));
}

TEST(Checkpoint, SavingACommittedStepIsAnError) {
  TempRoot root;
  State st;
  const Tree tree = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager ckpt(root.path());
  ckpt.save(3, tree);
  EXPECT_THROW(ckpt.save(3, tree), AlreadyExists);
  EXPECT_THROW(ckpt.save(4, tree, "[1, 2]"), InvalidArgument);  // metadata must be an object
}

// set_processes checks its list against the job (one process here: only {} and {0} are valid) and a save with
// the one participant still commits.
TEST(Checkpoint, SetProcessesChecksTheList) {
  TempRoot root;
  State st;
  CheckpointManager ckpt(root.path());
  try {
    ckpt.set_processes({1});
    ADD_FAILURE() << "set_processes({1}) in a one-process job did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected ascending distinct process indices in [0, 1), found {1}"));
  }
  EXPECT_THROW(ckpt.set_processes({0, 0}), InvalidArgument);
  EXPECT_THROW(ckpt.set_processes({-1}), InvalidArgument);
  ckpt.set_processes({0});
  ckpt.save(1, st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"})));
  EXPECT_EQ(ckpt.all_steps(), std::vector<int64_t>{1});
  ckpt.set_processes({});
  ckpt.save(2, st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"})));
  st.expect_equal(ckpt.restore(2, st.on(mesh_of({2}, {"x"}), mesh_of({1, 2}, {"x", "y"}))));
}

TEST(Checkpoint, AsyncSaveCommitsAndSurfacesErrors) {
  TempRoot root;
  State st;
  const Mesh m4 = mesh_of({4}, {"x"}), m22 = mesh_of({2, 2}, {"x", "y"});
  CheckpointManager ckpt(root.path());
  ckpt.save_async(1, st.on(m4, m22), R"({"step": 1})");
  ckpt.save_async(2, st.on(m4, m22), R"({"step": 2})");  // joins the first
  ckpt.wait();
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{1, 2}));
  st.expect_equal(ckpt.restore(2, st.on(m22, m4.size() == 4 ? mesh_of({4, 1}, {"x", "y"}) : m22)));
  // A failing background write: the error comes from wait(), once.
  ckpt.save_async(2, st.on(m4, m22));
  EXPECT_THROW(ckpt.wait(), AlreadyExists);
  EXPECT_NO_THROW(ckpt.wait());
  // ... or from the next save, which then does not run.
  ckpt.save_async(1, st.on(m4, m22));
  EXPECT_THROW(ckpt.save(3, st.on(m4, m22)), AlreadyExists);
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{1, 2}));
  ckpt.save(3, st.on(m4, m22));
  EXPECT_EQ(ckpt.all_steps(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(Checkpoint, AsyncSaveOwnsItsCopyOfTheData) {
  TempRoot root;
  State st;
  CheckpointManager ckpt(root.path());
  {
    Tree t = st.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
    ckpt.save_async(5, t);
  }  // the arrays are gone while the write runs
  ckpt.wait();
  st.expect_equal(ckpt.restore(5, st.on(mesh_of({2}, {"x"}), mesh_of({2, 1}, {"x", "y"}))));
}

// ---- corruption: every error names the file and the leaf ----------------------------------------------------

// Flips one bit of the byte at `offset` of the file at `path`.
void flip_bit(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  f.seekp(offset);
  c = static_cast<char>(c ^ 0x10);
  f.write(&c, 1);
}

// Every corruption test with each checksum (checksum.h): the default XXH3-128 and SHA-256 on request.
class Corruption : public ::testing::TestWithParam<Checksum> {
 protected:
  void SetUp() override {
    ckpt_.save(1, tree_);
    dir_ = root_.path() + "/1";
  }
  // The file of shard 0 of leaf 3 ("params/w").
  std::string w_file() const { return dir_ + "/leaf3.shard0.npy"; }
  template <typename E>
  std::string restore_error() {
    try {
      ckpt_.restore(1, tree_);
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "no error";
  }

  TempRoot root_;
  State st_;
  Tree tree_ = st_.on(mesh_of({4}, {"x"}), mesh_of({2, 2}, {"x", "y"}));
  CheckpointManager ckpt_{root_.path(), {.checksum = GetParam()}};
  std::string dir_;
};
INSTANTIATE_TEST_SUITE_P(Checksums, Corruption, ::testing::Values(Checksum::kXxh3_128, Checksum::kSha256),
                         [](const auto& info) { return info.param == Checksum::kSha256 ? "sha256" : "xxh3"; });

TEST_P(Corruption, TruncatedShard) {
  fs::resize_file(w_file(), fs::file_size(w_file()) - 5);
  const std::string msg = restore_error<DataLoss>();
  EXPECT_THAT(msg, HasSubstr("[checkpoint] leaf 'params/w'"));
  EXPECT_THAT(msg, HasSubstr("leaf3.shard0.npy"));
  EXPECT_THAT(msg, HasSubstr("is truncated: expected"));
}

TEST_P(Corruption, FlippedByte) {
  flip_bit(w_file(), 140);
  const std::string msg = restore_error<DataLoss>();
  EXPECT_THAT(msg, HasSubstr("leaf 'params/w'"));
  EXPECT_THAT(msg, HasSubstr("leaf3.shard0.npy"));
  EXPECT_THAT(msg, HasSubstr(std::string("is corrupted: ") + std::string(checksum_name(GetParam())) + " of bytes [0, "));
}

TEST_P(Corruption, MissingFile) {
  fs::remove(w_file());
  const std::string msg = restore_error<NotFound>();
  EXPECT_THAT(msg, HasSubstr("leaf 'params/w'"));
  EXPECT_THAT(msg, HasSubstr("leaf3.shard0.npy' is missing"));
}

TEST_P(Corruption, EditedManifest) {
  const std::string path = dir_ + "/manifest.json";
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"int32\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "\"uint32\"");
  std::ofstream(path, std::ios::trunc) << text;
  const std::string msg = restore_error<DataLoss>();
  EXPECT_THAT(msg, HasSubstr("manifest.json' was modified after the commit: SHA-256 expected"));
}

TEST_P(Corruption, MismatchedTreeDtypeAndShape) {
  auto expect_invalid = [&](const Tree& like, const std::vector<std::string>& needles) {
    try {
      ckpt_.restore(1, like);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      for (const std::string& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
    }
  };
  const Mesh m4 = mesh_of({4}, {"x"});
  Tree wrong_tree = tree_;
  wrong_tree["params"]["extra"] = device_put(st_.b, NamedSharding(m4, P()));
  expect_invalid(wrong_tree, {"tree structure expected", "(target), found", "manifest.json"});
  Tree wrong_dtype = tree_;
  wrong_dtype["params"]["w"] = device_put(test::random_buffer(DType::kFloat64, {16, 12}, 1), NamedSharding(m4, P()));
  expect_invalid(wrong_dtype, {"leaf 'params/w'", "dtype expected float64 (target), found float32 (checkpoint)"});
  Tree wrong_shape = tree_;
  wrong_shape["params"]["w"] = device_put(test::random_buffer(DType::kFloat32, {16, 8}, 1), NamedSharding(m4, P()));
  expect_invalid(wrong_shape, {"leaf 'params/w'", "global shape expected [16,8] (target), found [16,12] (checkpoint)"});
}

// The manifest names its checksum; a manifest of format version 2 (SHA-256 under the old field names, no
// "checksum") still restores, and its digests are still checked.
TEST_P(Corruption, ManifestsNameTheirChecksumAndVersion2StillRestores) {
  const std::string path = dir_ + "/manifest.json";
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string named = std::string("\"checksum\": \"") + std::string(checksum_name(GetParam())) + "\"";
  ASSERT_THAT(text, HasSubstr(named));
  ASSERT_THAT(text, HasSubstr("\"version\": 3"));
  if (GetParam() != Checksum::kSha256) return;  // version 2 was SHA-256 only
  // Rewrite it as version 2 wrote it, and the commit marker to match.
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  replace_all("\"version\": 3", "\"version\": 2");
  replace_all(" " + named + ",\n", "");
  replace_all("\"digest\":", "\"chunk_list_sha256\":");
  replace_all("\"chunk_digests\":", "\"chunk_sha256\":");
  ASSERT_THAT(text, ::testing::Not(HasSubstr("checksum")));
  std::ofstream(path, std::ios::trunc) << text;
  std::ofstream(dir_ + "/COMMIT", std::ios::trunc)
      << "{\"format\":\"mcx.checkpoint\",\"manifest_sha256\":\"" << to_hex(sha256(text)) << "\",\"step\":1}\n";
  st_.expect_equal(ckpt_.restore(1, tree_));
  flip_bit(w_file(), 150);
  EXPECT_THAT(restore_error<DataLoss>(), HasSubstr("is corrupted: sha256 of bytes [0, "));
}

TEST_P(Corruption, MissingCommitMarkerHidesTheStep) {
  fs::remove(dir_ + "/COMMIT");
  EXPECT_TRUE(ckpt_.all_steps().empty());
  EXPECT_THAT(restore_error<NotFound>(), HasSubstr("step 1 is not a committed checkpoint"));
}

}  // namespace
}  // namespace mcx::checkpoint
