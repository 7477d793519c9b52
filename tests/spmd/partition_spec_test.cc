// Index maths of partition specs, checked against hand-computed boxes and a brute-force enumeration of
// every global index.
#include "mcx/spmd/partition_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace mcx {
namespace {

using ::testing::HasSubstr;

MeshAxes mesh_of(std::vector<std::string> names, std::vector<int64_t> sizes) {
  return MeshAxes{std::move(names), std::move(sizes)};
}

TEST(MeshAxesTest, Basics) {
  MeshAxes m = mesh_of({"data", "model"}, {4, 2});
  EXPECT_EQ(m.num_devices(), 8);
  EXPECT_EQ(m.rank(), 2);
  EXPECT_EQ(m.index_of("model"), 1);
  EXPECT_EQ(m.index_of("nope"), -1);
  EXPECT_EQ(m.to_string(), "{data: 4, model: 2}");
  EXPECT_EQ(MeshAxes{}.num_devices(), 1);
  EXPECT_EQ(MeshAxes{}.to_string(), "{}");
}

TEST(PartitionSpecTest, PythonSpelling) {
  EXPECT_EQ(P().to_string(), "P()");
  EXPECT_EQ(P("data").to_string(), "P('data',)");
  EXPECT_EQ(P("data", None).to_string(), "P('data', None)");
  EXPECT_EQ(P(axes("x", "y")).to_string(), "P(('x', 'y'),)");
  EXPECT_EQ(P(None, axes("x", "y"), "z").to_string(), "P(None, ('x', 'y'), 'z')");
  EXPECT_EQ(P(Unconstrained, "x").to_string(), "P(P.UNCONSTRAINED, 'x')");
}

TEST(PartitionSpecTest, DimBeyondSizeIsReplicated) {
  PartitionSpec s = P("x");
  EXPECT_EQ(s.dim(0).axes, std::vector<std::string>{"x"});
  EXPECT_TRUE(s.dim(1).axes.empty());
  EXPECT_FALSE(s.dim(1).unconstrained);
  EXPECT_FALSE(s.has_unconstrained());
  EXPECT_TRUE(P(None, Unconstrained).has_unconstrained());
  EXPECT_EQ(P("x", None), P("x", None));
  EXPECT_NE(P("x"), P(axes("x", "y")));
}

TEST(IndexBoxTest, Helpers) {
  std::vector<int64_t> dims{4, 6};
  IndexBox f = full_box(dims);
  EXPECT_EQ(f.to_string(), "[0:4, 0:6]");
  EXPECT_EQ(f.num_elements(), 24);
  IndexBox a{{0, 2}, {2, 6}};
  IndexBox b{{1, 0}, {4, 3}};
  IndexBox i = intersect(a, b);
  EXPECT_EQ(i, (IndexBox{{1, 2}, {2, 3}}));
  EXPECT_EQ(i.shape(), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(f.contains(a));
  EXPECT_FALSE(a.contains(b));
  IndexBox disjoint = intersect(IndexBox{{0, 0}, {2, 2}}, IndexBox{{2, 0}, {4, 2}});
  EXPECT_EQ(disjoint.num_elements(), 0);
  EXPECT_EQ(full_box(std::vector<int64_t>{}).to_string(), "[]");
  EXPECT_EQ(full_box(std::vector<int64_t>{}).num_elements(), 1);
}

TEST(MeshCoordsTest, RowMajorRoundTrip) {
  MeshAxes m = mesh_of({"a", "b", "c"}, {2, 3, 4});
  EXPECT_EQ(mesh_coords(m, 0), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(mesh_coords(m, 1), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(mesh_coords(m, 4), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(mesh_coords(m, 23), (std::vector<int64_t>{1, 2, 3}));
  for (int64_t p = 0; p < m.num_devices(); ++p) EXPECT_EQ(mesh_position(m, mesh_coords(m, p)), p);
}

TEST(IndexBoxTest, HandComputed) {
  MeshAxes m = mesh_of({"x", "y"}, {2, 4});
  std::vector<int64_t> dims{4, 8};
  // Device 5 sits at (1, 1).
  EXPECT_EQ(index_box(P("x", "y"), m, dims, 5), (IndexBox{{2, 2}, {4, 4}}));
  EXPECT_EQ(index_box(P("y", "x"), m, std::vector<int64_t>{8, 4}, 5), (IndexBox{{2, 2}, {4, 4}}));
  // x major: shard index = x*4 + y = 5 -> rows 5.
  EXPECT_EQ(index_box(P(axes("x", "y")), m, std::vector<int64_t>{8, 3}, 5), (IndexBox{{5, 0}, {6, 3}}));
  // y major: shard index = y*2 + x = 3.
  EXPECT_EQ(index_box(P(axes("y", "x")), m, std::vector<int64_t>{8, 3}, 5), (IndexBox{{3, 0}, {4, 3}}));
  EXPECT_EQ(index_box(P(), m, dims, 7), full_box(dims));
  EXPECT_EQ(shard_shape(P(None, "y"), m, dims), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(num_shards(P(axes("x", "y")), m, 0), 8);
  EXPECT_EQ(num_shards(P(axes("x", "y")), m, 1), 1);
}

TEST(ValidateSpecTest, Errors) {
  MeshAxes m = mesh_of({"x", "y"}, {2, 4});
  std::vector<int64_t> dims{4, 8};
  EXPECT_TRUE(validate_spec(P("x", "y"), m, dims, "api").ok());
  EXPECT_TRUE(validate_spec(P(), m, dims, "api").ok());
  EXPECT_TRUE(validate_spec(P(axes("x", "y")), m, std::vector<int64_t>{8}, "api").ok());

  absl::Status s = validate_spec(P("x", "y", None), m, dims, "device_put");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("[device_put] "));
  EXPECT_THAT(s.message(), HasSubstr("3 entries"));
  EXPECT_THAT(s.message(), HasSubstr("rank 2"));

  s = validate_spec(P("z"), m, dims, "api");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'z'"));
  EXPECT_THAT(s.message(), HasSubstr("{x: 2, y: 4}"));

  s = validate_spec(P("x", "x"), m, dims, "api");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("used twice"));
  s = validate_spec(P(axes("y", "y")), m, dims, "api");
  EXPECT_THAT(s.message(), HasSubstr("used twice"));

  s = validate_spec(P(None, axes("x", "y")), m, std::vector<int64_t>{4, 12}, "api");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dimension 1"));
  EXPECT_THAT(s.message(), HasSubstr("size 12"));
  EXPECT_THAT(s.message(), HasSubstr("divisible by 8"));
  EXPECT_THAT(s.message(), HasSubstr("('x', 'y')"));

  s = validate_spec(P("y"), m, std::vector<int64_t>{6}, "api");
  EXPECT_THAT(s.message(), HasSubstr("divisible by 4"));

  s = validate_spec(P(Unconstrained), m, dims, "api");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Unconstrained"));
  EXPECT_TRUE(validate_spec(P(Unconstrained, "y"), m, dims, "api", /*allow_unconstrained=*/true).ok());

  // Size-1 axes: any dimension divides.
  MeshAxes one = mesh_of({"a", "b"}, {1, 3});
  EXPECT_TRUE(validate_spec(P("a"), one, std::vector<int64_t>{5}, "api").ok());
  EXPECT_FALSE(validate_spec(P("b"), one, std::vector<int64_t>{5}, "api").ok());
}

TEST(ReplicationTest, FullyReplicated) {
  MeshAxes m = mesh_of({"x", "one", "y"}, {2, 1, 4});
  EXPECT_TRUE(is_fully_replicated(P(), m));
  EXPECT_TRUE(is_fully_replicated(P(None, "one"), m));
  EXPECT_FALSE(is_fully_replicated(P(None, "y"), m));
  EXPECT_FALSE(is_fully_replicated(P(axes("one", "x")), m));
}

// Reference ownership: whether the device at mesh coordinates `c` holds global index `idx`, computed
// element by element from the definition (shard number along each dimension = mixed-radix number of the
// device's coordinates over that dimension's axes, first axis most significant; element i of a dimension of
// size n split k ways is in shard floor(i * k / n)).
bool holds(const PartitionSpec& spec, const MeshAxes& m, const std::vector<int64_t>& dims,
           const std::vector<int64_t>& c, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t digit = 0, k = 1;
    for (const auto& a : spec.dim(static_cast<int>(d)).axes) {
      int ai = m.index_of(a);
      digit = digit * m.sizes[ai] + c[ai];
      k *= m.sizes[ai];
    }
    if (idx[d] * k / dims[d] != digit) return false;
  }
  return true;
}

bool box_contains(const IndexBox& b, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < idx.size(); ++d) {
    if (idx[d] < b.start[d] || idx[d] >= b.limit[d]) return false;
  }
  return true;
}

struct Case {
  MeshAxes mesh;
  PartitionSpec spec;
  std::vector<int64_t> dims;
};

void check_brute_force(const Case& t) {
  SCOPED_TRACE(t.spec.to_string() + " on " + t.mesh.to_string());
  ASSERT_TRUE(validate_spec(t.spec, t.mesh, t.dims, "test").ok());
  const int64_t n = t.mesh.num_devices();
  std::vector<IndexBox> boxes;
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> distinct;
  for (int64_t p = 0; p < n; ++p) {
    IndexBox b = index_box(t.spec, t.mesh, t.dims, p);
    EXPECT_EQ(b.shape(), shard_shape(t.spec, t.mesh, t.dims));
    boxes.push_back(b);
    distinct.insert({b.start, b.limit});
  }
  EXPECT_EQ(n % static_cast<int64_t>(distinct.size()), 0);
  const int64_t replication = n / static_cast<int64_t>(distinct.size());
  EXPECT_EQ(is_fully_replicated(t.spec, t.mesh), distinct.size() == 1);
  int64_t total = 1;
  for (int64_t d : t.dims) total *= d;
  std::vector<int64_t> idx(t.dims.size(), 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t r = e;
    for (int d = static_cast<int>(t.dims.size()) - 1; d >= 0; --d) {
      idx[d] = r % t.dims[d];
      r /= t.dims[d];
    }
    int64_t holders = 0, distinct_holders = 0;
    for (int64_t p = 0; p < n; ++p) {
      bool in_box = box_contains(boxes[p], idx);
      ASSERT_EQ(in_box, holds(t.spec, t.mesh, t.dims, mesh_coords(t.mesh, p), idx)) << "device " << p;
      holders += in_box;
    }
    for (const auto& [s, l] : distinct) distinct_holders += box_contains(IndexBox{s, l}, idx);
    ASSERT_EQ(holders, replication);
    ASSERT_EQ(distinct_holders, 1);  // the distinct boxes tile the array
  }
}

TEST(IndexBoxTest, BruteForceManyMeshesAndSpecs) {
  MeshAxes m1 = mesh_of({"x"}, {4});
  MeshAxes m2 = mesh_of({"x", "y"}, {2, 4});
  MeshAxes m3 = mesh_of({"x", "y"}, {4, 2});
  MeshAxes m4 = mesh_of({"a", "b", "c"}, {2, 2, 2});
  MeshAxes m5 = mesh_of({"a", "one", "b"}, {3, 1, 2});
  MeshAxes m6 = mesh_of({"x"}, {3});
  MeshAxes m7 = mesh_of({"p", "q", "r"}, {2, 3, 2});
  std::vector<Case> cases = {
      {m1, P(), {4, 3}},
      {m1, P("x"), {8, 3}},
      {m1, P(None, "x"), {3, 4}},
      {m2, P("x", "y"), {4, 8}},
      {m2, P("y", "x"), {4, 2}},
      {m2, P(axes("x", "y")), {8, 2}},
      {m2, P(axes("y", "x")), {16}},
      {m2, P(None, "y"), {3, 4}},
      {m2, P("x"), {2, 5}},
      {m3, P("x", "y"), {4, 2}},
      {m3, P(axes("y", "x"), None), {8, 3}},
      {m4, P("a", "b", "c"), {2, 4, 2}},
      {m4, P(axes("c", "a"), "b"), {4, 2}},
      {m4, P(None, axes("a", "b", "c")), {2, 8}},
      {m4, P("b"), {6, 3}},
      {m4, P(axes("b", "c"), None, "a"), {4, 1, 2}},
      {m5, P("one", axes("b", "a")), {5, 6}},
      {m5, P(axes("a", "one"), "b"), {3, 4}},
      {m6, P("x"), {6}},
      {m6, P(None, None, "x"), {1, 2, 3}},
      {m7, P(axes("r", "p"), "q"), {4, 3}},
      {m7, P("q", None, axes("p", "r")), {3, 2, 4}},
      {mesh_of({}, {}), P(), {3, 2}},
      {m2, P(), {}},
  };
  for (const Case& t : cases) check_brute_force(t);
}

TEST(AxisGroupsTest, GroupsPartitionThePositions) {
  MeshAxes m = mesh_of({"x", "y"}, {2, 4});
  std::vector<int> over_y{1};
  auto g = axis_groups(m, over_y);
  EXPECT_EQ(g, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  std::vector<int> over_x{0};
  g = axis_groups(m, over_x);
  EXPECT_EQ(g, (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  std::vector<int> both_yx{1, 0};  // y major: order by y*2 + x
  g = axis_groups(m, both_yx);
  EXPECT_EQ(g, (std::vector<std::vector<int64_t>>{{0, 4, 1, 5, 2, 6, 3, 7}}));
  g = axis_groups(m, std::span<const int>{});
  EXPECT_EQ(g.size(), 8u);
  for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(g[p], std::vector<int64_t>{p});
}

TEST(AxisGroupsTest, ThreeDMeshMatchesDefinition) {
  MeshAxes m = mesh_of({"a", "b", "c"}, {2, 3, 2});
  std::vector<int> ax{2, 0};
  auto groups = axis_groups(m, ax);
  ASSERT_EQ(groups.size(), 3u);
  std::set<int64_t> seen;
  for (const auto& g : groups) {
    ASSERT_EQ(g.size(), 4u);
    auto c0 = mesh_coords(m, g[0]);
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_TRUE(seen.insert(g[i]).second);
      auto c = mesh_coords(m, g[i]);
      EXPECT_EQ(c[1], c0[1]);                             // same coordinate on the other axis
      EXPECT_EQ(c[2] * 2 + c[0], static_cast<int64_t>(i));  // ordered by c major, a minor
    }
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(EncodeSpecTest, RoundTrip) {
  MeshAxes m = mesh_of({"a", "b", "c"}, {2, 2, 2});
  for (const PartitionSpec& s : {P(), P("a"), P(None, axes("c", "a")), P(Unconstrained, "b", None),
                                 P(axes("a", "b", "c"))}) {
    auto e = encode_spec(s, m);
    auto d = decode_spec(e, m);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, s) << s.to_string();
  }
  EXPECT_EQ(encode_spec(P(None, axes("c", "a"), Unconstrained), m),
            (std::vector<int64_t>{0, 2, 2, 0, -1}));
}

TEST(EncodeSpecTest, DecodeErrors) {
  MeshAxes m = mesh_of({"a", "b"}, {2, 2});
  auto bad_axis = decode_spec(std::vector<int64_t>{1, 5}, m);
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_axis.status().message(), HasSubstr("axis index 5"));
  auto twice = decode_spec(std::vector<int64_t>{1, 0, 1, 0}, m);
  EXPECT_THAT(twice.status().message(), HasSubstr("used twice"));
  auto truncated = decode_spec(std::vector<int64_t>{2, 0}, m);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative = decode_spec(std::vector<int64_t>{-3}, m);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mcx
