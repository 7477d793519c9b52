// Mesh construction and Sharding index domains (the test executable runs with 8 virtual CPU devices).
#include "mcx/runtime/sharding.h"

#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mcx/core/error.h"
#include "mcx/runtime/mesh.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

std::vector<Device> devs(std::initializer_list<int> ids) {
  std::vector<Device> out;
  for (int i : ids) out.push_back(devices().at(i));
  return out;
}

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

TEST(MeshTest, MakeMeshUsesTheFirstDevices) {
  ASSERT_GE(device_count(), 8);
  Mesh m = make_mesh({2, 4}, {"x", "y"});
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.devices(), devs({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(m.axis_size("y"), 4);
  EXPECT_EQ(m.axes(), (MeshAxes{{"x", "y"}, {2, 4}}));
  EXPECT_EQ(m.device_at({1, 2}), devices()[6]);
  EXPECT_EQ(m.position_of(devices()[6]), 6);
  EXPECT_TRUE(m.is_fully_addressable());
  EXPECT_EQ(make_mesh({3}, {"d"}).to_string(), "Mesh({d: 3}, devices=[cpu:0 cpu:1 cpu:2])");
  Mesh sub = make_mesh({2}, {"d"}, devs({5, 3}));
  EXPECT_EQ(sub.device_at({0}), devices()[5]);
  EXPECT_EQ(sub.position_of(devices()[0]), -1);
  EXPECT_EQ(make_mesh({2, 4}, {"x", "y"}), m);
  EXPECT_FALSE(make_mesh({4, 2}, {"x", "y"}) == m);
  EXPECT_FALSE(make_mesh({2}, {"d"}, devs({3, 5})) == sub);
}

TEST(MeshTest, ConstructionErrors) {
  EXPECT_THAT(invalid_argument_message([] { make_mesh({2, 2}, {"x", "y"}, devs({0, 1, 2})); }),
              AllOf(HasSubstr("[Mesh]"), HasSubstr("need 4 devices"), HasSubstr("3 were given")));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({2, 2}, {"x", "x"}); }), HasSubstr("'x' appears twice"));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({2}, {""}); }), HasSubstr("empty name"));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({2}, {"x", "y"}); }), HasSubstr("one name per axis"));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({2}, {"x"}, devs({4, 4})); }),
              AllOf(HasSubstr("cpu:4 appears twice"), HasSubstr("positions 0 and 1")));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({0}, {"x"}); }), HasSubstr("size 0"));
  EXPECT_THAT(invalid_argument_message([] { make_mesh({4, 4}, {"x", "y"}); }),
              AllOf(HasSubstr("[make_mesh]"), HasSubstr("need 16"), HasSubstr("MCX_CPU_DEVICE_COUNT")));
  Mesh m = make_mesh({2}, {"x"});
  EXPECT_THAT(invalid_argument_message([&] { m.axis_size("nope"); }), HasSubstr("no axis 'nope'"));
  EXPECT_THAT(invalid_argument_message([&] { m.device_at({2}); }), HasSubstr("not in the mesh"));
}

TEST(ShardingTest, NamedShardingIndexMap) {
  Mesh m = make_mesh({2, 4}, {"x", "y"});
  Sharding s = NamedSharding(m, P("x", "y"));
  std::vector<int64_t> dims{4, 8};
  auto map = s.devices_indices_map(dims);
  ASSERT_EQ(map.size(), 8u);
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ(map[p].first, devices()[p]);
    int64_t x = p / 4, y = p % 4;
    EXPECT_EQ(map[p].second, (IndexBox{{2 * x, 2 * y}, {2 * x + 2, 2 * y + 2}}));
  }
  EXPECT_EQ(s.addressable_devices_indices_map(dims), map);
  EXPECT_EQ(s.shard_shape(dims), (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE(s.is_fully_replicated());
  EXPECT_TRUE(s.is_fully_addressable());
  EXPECT_FALSE(s.is_single_device());
  EXPECT_EQ(s.num_devices(), 8);
  EXPECT_EQ(s.to_string(), "NamedSharding(mesh={x: 2, y: 4}, spec=P('x', 'y'))");

  // Partial replication: P(None, 'x') over a 2x4 mesh: devices with the same x hold the same box.
  Sharding r = NamedSharding(m, P(None, "x"));
  auto rmap = r.devices_indices_map(dims);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(rmap[p].second, (IndexBox{{0, 4 * (p / 4)}, {4, 4 * (p / 4) + 4}}));
  EXPECT_TRUE(NamedSharding(m, P()).is_fully_replicated());
}

TEST(ShardingTest, SingleDevice) {
  Sharding s = SingleDeviceSharding(devices()[3]);
  EXPECT_TRUE(s.is_single_device());
  EXPECT_EQ(s.num_devices(), 1);
  EXPECT_EQ(s.device_set(), devs({3}));
  std::vector<int64_t> dims{5, 7};
  auto map = s.devices_indices_map(dims);
  ASSERT_EQ(map.size(), 1u);
  EXPECT_EQ(map[0].first, devices()[3]);
  EXPECT_EQ(map[0].second, full_box(dims));
  EXPECT_TRUE(s.is_fully_replicated());
  EXPECT_EQ(s.to_string(), "SingleDeviceSharding(cpu:3)");
  EXPECT_EQ(Sharding(), SingleDeviceSharding(default_device()));
  EXPECT_TRUE(s.validate(dims, "api").ok());
}

TEST(ShardingTest, NamedShardingErrors) {
  Mesh m = make_mesh({2, 4}, {"x", "y"});
  EXPECT_THAT(invalid_argument_message([&] { NamedSharding(m, P("z")); }),
              AllOf(HasSubstr("[NamedSharding]"), HasSubstr("'z'")));
  EXPECT_THAT(invalid_argument_message([&] { NamedSharding(m, P("x", "x")); }), HasSubstr("used twice"));
  EXPECT_THAT(invalid_argument_message([&] { NamedSharding(m, P(axes("y", "x", "y"))); }), HasSubstr("used twice"));
  EXPECT_THAT(invalid_argument_message([&] { NamedSharding(m, P(Unconstrained)); }), HasSubstr("Unconstrained"));
  Sharding s = NamedSharding(m, P(None, axes("x", "y")));
  absl::Status st = s.validate(std::vector<int64_t>{3, 12}, "device_put");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), AllOf(HasSubstr("[device_put]"), HasSubstr("size 12"), HasSubstr("divisible by 8")));
  st = s.validate(std::vector<int64_t>{8}, "device_put");
  EXPECT_THAT(st.message(), HasSubstr("rank 1"));
}

// The index-map queries check their precondition (the spec fits the shape) instead of returning boxes that
// leave rows to no device: P("y") over 4 devices on 6 rows used to give shard shape [1, 8] (rows 4-5 lost).
TEST(ShardingTest, QueriesOnAShapeTheShardingDoesNotDivideRaise) {
  const Sharding s = NamedSharding(make_mesh({2, 4}, {"x", "y"}), P("y"));
  const std::vector<int64_t> bad = {6, 8};
  for (const auto& [name, query] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"Sharding::shard_shape", [&] { s.shard_shape(bad); }},
           {"Sharding::devices_indices_map", [&] { s.devices_indices_map(bad); }},
           {"Sharding::addressable_devices_indices_map", [&] { s.addressable_devices_indices_map(bad); }},
           {"shard_shape", [&] { shard_shape(s.spec(), s.mesh().axes(), bad); }},
           {"index_box", [&] { index_box(s.spec(), s.mesh().axes(), bad, 0); }}}) {
    EXPECT_THAT(invalid_argument_message(query),
                AllOf(HasSubstr("[" + name + "]"), HasSubstr("size 6"), HasSubstr("divisible by 4")))
        << name;
  }
  // A rank below the spec's is the same kind of error.
  const Sharding two_d = NamedSharding(make_mesh({2, 4}, {"x", "y"}), P("x", "y"));
  EXPECT_THAT(invalid_argument_message([&] { two_d.shard_shape(std::vector<int64_t>{8}); }),
              AllOf(HasSubstr("[Sharding::shard_shape]"), HasSubstr("rank 1")));
  // Shapes that fit are unchanged.
  EXPECT_EQ(s.shard_shape(std::vector<int64_t>{8, 8}), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(s.devices_indices_map(std::vector<int64_t>{8, 8}).size(), 8u);
}

TEST(ShardingTest, Equivalence) {
  std::vector<int64_t> dims{8, 4};
  Mesh m = make_mesh({4, 1}, {"x", "one"});
  EXPECT_TRUE(NamedSharding(m, P("x", "one")).equivalent(NamedSharding(m, P("x")), dims));
  EXPECT_FALSE(NamedSharding(m, P("x", "one")) == NamedSharding(m, P("x")));
  EXPECT_EQ(NamedSharding(m, P("x", None)), NamedSharding(m, P("x")));  // trailing None is no entry
  EXPECT_FALSE(NamedSharding(m, P("x")).equivalent(NamedSharding(m, P(None, "x")), dims));
  // A 1-device mesh with any spec is the single-device sharding of that device.
  Mesh one = make_mesh({1}, {"d"}, devs({2}));
  EXPECT_TRUE(NamedSharding(one, P("d")).equivalent(SingleDeviceSharding(devices()[2]), dims));
  EXPECT_FALSE(NamedSharding(one, P("d")).equivalent(SingleDeviceSharding(devices()[3]), dims));
  // Same boxes, different device order: not equivalent.
  Mesh fwd = make_mesh({2}, {"d"}, devs({0, 1}));
  Mesh rev = make_mesh({2}, {"d"}, devs({1, 0}));
  EXPECT_FALSE(NamedSharding(fwd, P("d")).equivalent(NamedSharding(rev, P("d")), dims));
  EXPECT_TRUE(NamedSharding(fwd, P()).equivalent(NamedSharding(rev, P()), dims));
  // Differently shaped meshes over the same devices that lay the value out identically.
  Mesh flat = make_mesh({4}, {"all"});
  Mesh grid = make_mesh({2, 2}, {"a", "b"});
  EXPECT_TRUE(NamedSharding(flat, P("all")).equivalent(NamedSharding(grid, P(axes("a", "b"))), dims));
  EXPECT_FALSE(NamedSharding(flat, P("all")).equivalent(NamedSharding(grid, P(axes("b", "a"))), dims));
  // A spec that does not fit the value is equivalent to nothing else.
  EXPECT_FALSE(NamedSharding(flat, P("all")).equivalent(NamedSharding(grid, P(axes("a", "b"))),
                                                        std::vector<int64_t>{6}));
}

}  // namespace
}  // namespace mcx
