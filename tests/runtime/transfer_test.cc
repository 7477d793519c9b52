// Placing, resharding and fetching array data, checked byte for byte against slices computed element by
// element from the original host data (the test executable runs with 8 virtual CPU devices).
#include "mcx/runtime/transfer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "mcx/core/error.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/mesh.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// Host values as a buffer of this process's first device (through its platform: device_platform.h).
std::shared_ptr<const DeviceBuffer> on_device(Buffer b) {
  return value_or_throw(to_device(std::move(b), local_devices()[0]));
}

std::string msg(const absl::Status& s) { return std::string(s.message()); }

std::vector<Device> devs(std::initializer_list<int> ids) {
  std::vector<Device> out;
  for (int i : ids) out.push_back(devices().at(i));
  return out;
}

// Random bytes, so that every element is distinguishable whatever the dtype.
Buffer random_buffer(DType dtype, std::vector<int64_t> dims, uint32_t seed) {
  Buffer b = Buffer::uninitialized(dtype, std::move(dims));
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(b.mutable_data());
  for (size_t i = 0; i < b.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return b;
}

// The slice of `whole` given by box, one element at a time (independent of box_copy).
Buffer reference_slice(const Buffer& whole, const IndexBox& box) {
  Buffer out = Buffer::uninitialized(whole.dtype(), box.shape());
  const size_t es = dtype_size(whole.dtype());
  const int rank = whole.rank();
  std::vector<int64_t> idx(rank);
  const auto* src = static_cast<const unsigned char*>(whole.data());
  auto* dst = static_cast<unsigned char*>(out.mutable_data());
  for (int64_t e = 0; e < out.num_elements(); ++e) {
    int64_t r = e;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = box.start[d] + r % (box.limit[d] - box.start[d]);
      r /= box.limit[d] - box.start[d];
    }
    int64_t flat = 0;
    for (int d = 0; d < rank; ++d) flat = flat * whole.dims()[d] + idx[d];
    std::memcpy(dst + e * es, src + flat * es, es);
  }
  return out;
}

// Every shard is on the sharding's device, holds its box, and its data is the box's slice of `whole`.
void expect_shards_match(const ArrayValue& v, const Buffer& whole) {
  auto map = v.sharding.addressable_devices_indices_map(whole.dims());
  ASSERT_EQ(v.shards.size(), map.size());
  for (size_t i = 0; i < map.size(); ++i) {
    EXPECT_EQ(v.shards[i].device, map[i].first);
    EXPECT_EQ(v.shards[i].index, map[i].second);
    absl::StatusOr<Buffer> b = v.shards[i].buffer();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(b->bitwise_equal(reference_slice(whole, map[i].second)))
        << "shard " << i << " on " << map[i].first.to_string() << " box " << map[i].second.to_string();
  }
}

// Shardings over meshes of 1, 2, 3, 4 and 8 devices; every one fits dims with dims[0] % 24 == 0 and
// dims[1] % 4 == 0.
std::vector<Sharding> test_shardings() {
  return {
      SingleDeviceSharding(devices()[0]),
      SingleDeviceSharding(devices()[5]),
      NamedSharding(make_mesh({8}, {"x"}), P("x")),
      NamedSharding(make_mesh({3}, {"x"}), P("x", None)),
      NamedSharding(make_mesh({3}, {"x"}, devs({1, 3, 5})), P("x")),
      NamedSharding(make_mesh({2, 4}, {"x", "y"}), P("x", "y")),
      NamedSharding(make_mesh({4, 2}, {"x", "y"}), P("y", "x")),
      NamedSharding(make_mesh({2, 2, 2}, {"a", "b", "c"}), P(axes("a", "b"), "c")),
      NamedSharding(make_mesh({2, 4}, {"x", "y"}), P(axes("y", "x"))),
      NamedSharding(make_mesh({4}, {"r"}, devs({4, 5, 6, 7})), P()),
      NamedSharding(make_mesh({2}, {"x"}, devs({7, 6})), P(None, "x")),
      NamedSharding(make_mesh({2, 4}, {"x", "y"}, devs({7, 6, 5, 4, 3, 2, 1, 0})), P("x", None)),
      NamedSharding(make_mesh({2, 1}, {"x", "one"}, devs({2, 3})), P("one", "x")),
  };
}

TEST(TransferTest, EveryReshardingPairRoundTrips) {
  const std::vector<Sharding> shardings = test_shardings();
  struct Value {
    DType dtype;
    std::vector<int64_t> dims;
  };
  const std::vector<Value> values = {{DType::kFloat32, {24, 4}}, {DType::kInt8, {48, 8, 3}},
                                     {DType::kBFloat16, {24, 12}}, {DType::kFloat64, {24, 4, 1, 2}}};
  uint32_t seed = 1;
  for (const Value& val : values) {
    const Buffer host = random_buffer(val.dtype, val.dims, seed++);
    for (const Sharding& from : shardings) {
      SCOPED_TRACE("from " + from.to_string() + " " + host.abstract_value().to_string());
      ArrayValue a = value_or_throw(put_host(host, from, /*is_explicit=*/true, "device_put"));
      EXPECT_TRUE(a.committed);
      expect_shards_match(a, host);
      for (const Sharding& to : shardings) {
        SCOPED_TRACE("to " + to.to_string());
        ArrayValue b = value_or_throw(reshard(a, to, /*is_explicit=*/true, /*committed=*/true, "device_put"));
        EXPECT_EQ(b.sharding, to);
        expect_shards_match(b, host);
        Buffer back = value_or_throw(fetch_to_host(b, /*is_explicit=*/true, "device_get"));
        ASSERT_TRUE(back.bitwise_equal(host));
      }
    }
  }
}

TEST(TransferTest, EquivalentReshardSharesShards) {
  Buffer host = random_buffer(DType::kFloat32, {8, 4}, 7);
  Mesh m = make_mesh({4, 1}, {"x", "one"});
  ArrayValue a = value_or_throw(put_host(host, NamedSharding(m, P("x", "one")), true, "device_put"));
  {
    // Nothing moves, so even a guard that forbids every device-to-device transfer stays quiet.
    TransferGuard no_moves(TransferDirection::kDeviceToDevice, TransferGuardLevel::kDisallowExplicit);
    ArrayValue b = value_or_throw(reshard(a, NamedSharding(m, P("x")), false, /*committed=*/false, "jit"));
    ASSERT_EQ(b.shards.size(), a.shards.size());
    for (size_t i = 0; i < a.shards.size(); ++i) EXPECT_EQ(b.shards[i].data, a.shards[i].data);
    EXPECT_FALSE(b.committed);
    EXPECT_EQ(b.sharding, NamedSharding(m, P("x")));
  }
  // Same box on the same device in a different sharding: shared, no move, so the guard stays quiet.
  ArrayValue c = value_or_throw(put_host(host, SingleDeviceSharding(devices()[2]), true, "device_put"));
  ArrayValue d = value_or_throw(
      reshard(c, NamedSharding(make_mesh({2}, {"d"}, devs({2, 3})), P()), true, true, "device_put"));
  EXPECT_EQ(d.shards[0].data, c.shards[0].data);  // cpu:2 keeps its buffer
  EXPECT_NE(d.shards[1].data, c.shards[0].data);  // cpu:3 gets a copy
  expect_shards_match(d, host);
}

TEST(TransferTest, ReshardAwaitsPendingSourcesOnTheTargetStreams) {
  // Source shards still being computed: the reshard returns at once and completes when they do.
  const std::vector<int64_t> dims{8, 2};
  Buffer host = random_buffer(DType::kInt32, dims, 11);
  Sharding from = NamedSharding(make_mesh({4}, {"x"}), P("x"));
  ArrayValue src;
  src.aval = host.abstract_value();
  src.sharding = from;
  std::vector<std::shared_ptr<AsyncBuffer>> pending;
  for (auto& [device, box] : from.devices_indices_map(dims)) {
    pending.push_back(AsyncBuffer::pending());
    src.shards.push_back(Shard{device, box, pending.back()});
  }
  Sharding to = NamedSharding(make_mesh({2}, {"y"}, devs({6, 7})), P(None, "y"));
  ArrayValue out = value_or_throw(reshard(src, to, true, true, "device_put"));
  for (const Shard& s : out.shards) EXPECT_FALSE(s.data->is_ready());
  for (size_t i = 0; i < pending.size(); ++i) pending[i]->set(on_device(reference_slice(host, src.shards[i].index)));
  expect_shards_match(out, host);
}

TEST(TransferTest, SourceErrorsPropagateToTheResharded) {
  const std::vector<int64_t> dims{4};
  Sharding from = NamedSharding(make_mesh({2}, {"x"}), P("x"));
  ArrayValue src;
  src.aval = AbstractValue{DType::kFloat32, concrete_shape(dims)};
  src.sharding = from;
  auto ok = AsyncBuffer::ready(on_device(Buffer::from_vector<float>({1, 2}, {2})));
  auto bad = AsyncBuffer::pending();
  bad->set_error(absl::InternalError("[exp on cpu:1] boom"));
  src.shards = {Shard{devices()[0], IndexBox{{0}, {2}}, ok}, Shard{devices()[1], IndexBox{{2}, {4}}, bad}};
  ArrayValue out = value_or_throw(reshard(src, SingleDeviceSharding(devices()[3]), true, true, "device_put"));
  absl::Status st = out.block_until_ready(default_device_deadline());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(msg(st), HasSubstr("[exp on cpu:1] boom"));
  EXPECT_EQ(fetch_to_host(out, true, "device_get").status().code(), absl::StatusCode::kInternal);
}

TEST(TransferTest, MissingShardIsNamedByToBufferAndFetch) {
  const std::vector<int64_t> dims{8, 4};
  Buffer host = random_buffer(DType::kFloat32, dims, 3);
  Sharding s = NamedSharding(make_mesh({2, 2}, {"x", "y"}), P("x", "y"));
  ArrayValue a = value_or_throw(put_host(host, s, true, "device_put"));
  a.shards.erase(a.shards.begin() + 2);  // cpu:2 holds [4:8, 0:2]
  absl::StatusOr<Buffer> b = a.to_buffer();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(msg(b.status()), AllOf(HasSubstr("[to_buffer]"), HasSubstr("[4:8, 0:2] (held by cpu:2, process 0)")));
  EXPECT_THAT(msg(b.status()), ::testing::Not(HasSubstr("[0:4, 0:2]")));
  absl::StatusOr<Buffer> f = fetch_to_host(a, true, "device_get");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(msg(f.status()), AllOf(HasSubstr("[device_get] "), HasSubstr("[4:8, 0:2]")));
  absl::StatusOr<ArrayValue> r = reshard(a, SingleDeviceSharding(devices()[0]), true, true, "device_put");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(msg(r.status()), AllOf(HasSubstr("[device_put]"), HasSubstr("[4:8, 0:2]")));

  // With replication, another device's copy of the box fills in.
  Sharding rep = NamedSharding(make_mesh({2, 2}, {"x", "y"}), P("x"));
  ArrayValue c = value_or_throw(put_host(host, rep, true, "device_put"));
  c.shards.erase(c.shards.begin() + 1);
  Buffer whole = value_or_throw(c.to_buffer());
  EXPECT_TRUE(whole.bitwise_equal(host));
}

TEST(TransferTest, PutHostValidatesTheSharding) {
  Buffer host = random_buffer(DType::kFloat32, {6, 4}, 5);
  absl::StatusOr<ArrayValue> a = put_host(host, NamedSharding(make_mesh({4}, {"x"}), P("x")), true, "device_put");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(msg(a.status()), AllOf(HasSubstr("[device_put]"), HasSubstr("size 6"), HasSubstr("divisible by 4")));
  // Rank 0 onto several devices: replicated.
  Buffer scalar = Buffer::scalar<int64_t>(42);
  ArrayValue s = value_or_throw(put_host(scalar, NamedSharding(make_mesh({3}, {"x"}), P()), true, "device_put"));
  EXPECT_EQ(s.shards.size(), 3u);
  expect_shards_match(s, scalar);
  EXPECT_TRUE(value_or_throw(fetch_to_host(s, true, "device_get")).bitwise_equal(scalar));
}

TEST(TransferTest, TransferGuardDirections) {
  Buffer host = random_buffer(DType::kFloat32, {8}, 9);
  Sharding on0 = SingleDeviceSharding(devices()[0]);
  Sharding split = NamedSharding(make_mesh({2}, {"x"}), P("x"));
  {
    TransferGuard g(TransferDirection::kHostToDevice, TransferGuardLevel::kDisallow);
    EXPECT_TRUE(put_host(host, on0, /*is_explicit=*/true, "device_put").ok());
    EXPECT_THROW((void)put_host(host, on0, /*is_explicit=*/false, "jit of 'f' argument 0"), TransferGuardError);
  }
  {
    TransferGuard g(TransferDirection::kHostToDevice, TransferGuardLevel::kDisallowExplicit);
    try {
      (void)put_host(host, on0, true, "device_put");
      ADD_FAILURE() << "expected TransferGuardError";
    } catch (const TransferGuardError& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("host-to-device"), HasSubstr("f32[8]"), HasSubstr("device_put")));
    }
    EXPECT_THROW((void)from_callback(host.abstract_value(), on0, [&](const IndexBox&) { return host; }),
                 TransferGuardError);
  }
  ArrayValue a = value_or_throw(put_host(host, on0, true, "device_put"));
  {
    TransferGuard g(TransferDirection::kDeviceToDevice, TransferGuardLevel::kDisallow);
    EXPECT_THROW((void)reshard(a, split, /*is_explicit=*/false, false, "jit"), TransferGuardError);
    EXPECT_TRUE(reshard(a, split, /*is_explicit=*/true, true, "device_put").ok());
    // cpu:1's half comes from cpu:0, so resharding to `split` moves data; to the same sharding it does not.
    EXPECT_TRUE(reshard(a, on0, /*is_explicit=*/false, false, "jit").ok());
  }
  {
    TransferGuard g(TransferDirection::kDeviceToHost, TransferGuardLevel::kDisallow);
    EXPECT_THROW((void)fetch_to_host(a, /*is_explicit=*/false, "print"), TransferGuardError);
    EXPECT_TRUE(fetch_to_host(a, /*is_explicit=*/true, "device_get").ok());
  }
}

TEST(FromCallbackTest, CallsOncePerAddressableShard) {
  const std::vector<int64_t> dims{8, 6};
  Buffer host = random_buffer(DType::kInt16, dims, 21);
  Sharding s = NamedSharding(make_mesh({2, 2}, {"x", "y"}), P("x"));  // each box twice
  std::vector<IndexBox> seen;
  ArrayValue v = value_or_throw(from_callback(host.abstract_value(), s, [&](const IndexBox& box) {
    seen.push_back(box);
    return reference_slice(host, box);
  }));
  ASSERT_EQ(seen.size(), 4u);
  auto map = s.addressable_devices_indices_map(dims);
  for (size_t i = 0; i < map.size(); ++i) EXPECT_EQ(seen[i], map[i].second);
  EXPECT_TRUE(v.committed);
  expect_shards_match(v, host);
}

// A Buffer the callback hands over (holds no other reference to) becomes the shard without a copy; one the
// caller keeps is copied, so writing it afterwards leaves the array as it was.
TEST(FromCallbackTest, AHandedOverBufferBecomesTheShardAndAKeptOneIsCopied) {
  AbstractValue aval{DType::kFloat32, concrete_shape({8, 4})};
  Sharding s = NamedSharding(make_mesh({2}, {"x"}), P("x"));
  std::vector<const void*> handed;
  ArrayValue v = value_or_throw(from_callback(aval, s, [&](const IndexBox& b) {
    Buffer out = Buffer::zeros(DType::kFloat32, b.shape());
    handed.push_back(out.data());
    return out;
  }));
  ASSERT_EQ(v.shards.size(), 2u);
  for (size_t i = 0; i < v.shards.size(); ++i) {
    absl::StatusOr<Buffer> b = v.shards[i].buffer();
    ASSERT_TRUE(b.ok()) << b.status();
    if (v.shards[i].device.platform == "cpu") {  // host memory is the device's (other platforms copy it over)
      EXPECT_EQ(b->data(), handed[i]) << "shard " << i << " was copied";
    }
  }
  std::vector<Buffer> kept;
  ArrayValue w = value_or_throw(from_callback(aval, s, [&](const IndexBox& b) {
    kept.push_back(Buffer::zeros(DType::kFloat32, b.shape()));
    return kept.back();
  }));
  ASSERT_EQ(kept.size(), 2u);
  for (size_t i = 0; i < w.shards.size(); ++i) {
    absl::StatusOr<Buffer> b = w.shards[i].buffer();  // waits for the copy
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_NE(b->data(), kept[i].data());
    float* p = kept[i].mutable_data<float>();
    for (int64_t k = 0; k < kept[i].num_elements(); ++k) p[k] = 7.0f;
    EXPECT_TRUE(b->bitwise_equal(Buffer::zeros(DType::kFloat32, b->dims()))) << "shard " << i;
  }
}

TEST(FromCallbackTest, Errors) {
  AbstractValue aval{DType::kFloat32, concrete_shape({8, 4})};
  Sharding s = NamedSharding(make_mesh({4}, {"x"}), P("x"));
  auto wrong_shape = from_callback(aval, s, [](const IndexBox&) { return Buffer::zeros(DType::kFloat32, {2, 3}); });
  EXPECT_EQ(wrong_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(msg(wrong_shape.status()), AllOf(HasSubstr("[make_array_from_callback]"), HasSubstr("f32[2,3]"),
                                                    HasSubstr("[0:2, 0:4]"), HasSubstr("float32[2, 4]")));
  auto wrong_dtype = from_callback(aval, s, [](const IndexBox& b) { return Buffer::zeros(DType::kInt32, b.shape()); });
  EXPECT_THAT(msg(wrong_dtype.status()), AllOf(HasSubstr("i32[2,4]"), HasSubstr("float32")));
  auto throws = from_callback(aval, s, [](const IndexBox& b) -> Buffer {
    if (b.start[0] == 4) throw std::runtime_error("no data for this box");
    return Buffer::zeros(DType::kFloat32, b.shape());
  });
  EXPECT_THAT(msg(throws.status()), AllOf(HasSubstr("threw"), HasSubstr("[4:6, 0:4]"), HasSubstr("no data")));
  auto uneven = from_callback(AbstractValue{DType::kFloat32, concrete_shape({6, 4})}, s,
                              [](const IndexBox& b) { return Buffer::zeros(DType::kFloat32, b.shape()); });
  EXPECT_THAT(msg(uneven.status()), HasSubstr("divisible by 4"));
}

TEST(FromSingleDeviceArraysTest, AssemblesAndShares) {
  const std::vector<int64_t> dims{4, 6};
  Buffer host = random_buffer(DType::kUInt8, dims, 31);
  Sharding s = NamedSharding(make_mesh({2}, {"x"}, devs({3, 1})), P(None, "x"));
  std::vector<ArrayValue> parts;
  for (auto& [device, box] : s.addressable_devices_indices_map(dims)) {
    parts.push_back(ArrayValue::single(reference_slice(host, box), device));
  }
  ArrayValue v = value_or_throw(from_single_device_arrays(host.abstract_value(), s, parts));
  EXPECT_TRUE(v.committed);
  expect_shards_match(v, host);
  EXPECT_EQ(v.shards[0].data, parts[0].shards[0].data);
  EXPECT_TRUE(value_or_throw(fetch_to_host(v, true, "device_get")).bitwise_equal(host));
}

TEST(FromSingleDeviceArraysTest, Errors) {
  const std::vector<int64_t> dims{4, 6};
  AbstractValue aval{DType::kFloat32, concrete_shape(dims)};
  Sharding s = NamedSharding(make_mesh({2}, {"x"}), P(None, "x"));
  auto part = [](int device, std::vector<int64_t> d, DType t = DType::kFloat32) {
    return ArrayValue::single(Buffer::zeros(t, std::move(d)), devices()[device]);
  };
  std::vector<ArrayValue> one{part(0, {4, 3})};
  auto count = from_single_device_arrays(aval, s, one);
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(msg(count.status()),
              AllOf(HasSubstr("[make_array_from_single_device_arrays]"), HasSubstr("expected 2"), HasSubstr("found 1")));
  std::vector<ArrayValue> shape{part(0, {4, 3}), part(1, {4, 6})};
  EXPECT_THAT(msg(from_single_device_arrays(aval, s, shape).status()),
              AllOf(HasSubstr("array 1"), HasSubstr("f32[4,6]"), HasSubstr("shard shape [4, 3]")));
  std::vector<ArrayValue> dtype{part(0, {4, 3}), part(1, {4, 3}, DType::kFloat64)};
  EXPECT_THAT(msg(from_single_device_arrays(aval, s, dtype).status()),
              AllOf(HasSubstr("array 1"), HasSubstr("f64[4,3]"), HasSubstr("float32")));
  std::vector<ArrayValue> device{part(0, {4, 3}), part(2, {4, 3})};
  EXPECT_THAT(msg(from_single_device_arrays(aval, s, device).status()),
              AllOf(HasSubstr("array 1 is on cpu:2"), HasSubstr("expected it on cpu:1")));
  Buffer half = Buffer::zeros(DType::kFloat32, {4, 3});
  ArrayValue multi = value_or_throw(put_host(half, NamedSharding(make_mesh({2}, {"x"}), P()), true, "device_put"));
  std::vector<ArrayValue> sharded{multi, part(1, {4, 3})};
  EXPECT_THAT(msg(from_single_device_arrays(aval, s, sharded).status()),
              AllOf(HasSubstr("array 0"), HasSubstr("expected a single-device array")));
}

TEST(FromProcessLocalDataTest, SingleProcessHoldsEveryDimensionWhole) {
  const std::vector<int64_t> dims{8, 6};
  Buffer host = random_buffer(DType::kFloat32, dims, 41);
  Sharding s = NamedSharding(make_mesh({4, 2}, {"x", "y"}), P("x", "y"));
  ArrayValue inferred = value_or_throw(from_process_local_data(s, host, {}));
  EXPECT_EQ(inferred.aval, host.abstract_value());
  expect_shards_match(inferred, host);
  ArrayValue given = value_or_throw(from_process_local_data(s, host, dims));
  expect_shards_match(given, host);

  auto wrong_global = from_process_local_data(s, host, std::vector<int64_t>{16, 6});
  EXPECT_EQ(wrong_global.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(msg(wrong_global.status()),
              AllOf(HasSubstr("[make_array_from_process_local_data]"), HasSubstr("dimension 0"),
                    HasSubstr("size 8; expected 16"), HasSubstr("not sharded across processes")));
  auto wrong_rank = from_process_local_data(s, host, std::vector<int64_t>{8});
  EXPECT_THAT(msg(wrong_rank.status()), HasSubstr("rank 2"));
  Buffer odd = random_buffer(DType::kFloat32, {6, 6}, 1);
  EXPECT_THAT(msg(from_process_local_data(s, odd, {}).status()), HasSubstr("does not divide into the 4 shards"));
  Sharding too_long = NamedSharding(make_mesh({2}, {"x"}), P(None, None, "x"));
  EXPECT_THAT(msg(from_process_local_data(too_long, host, {}).status()), HasSubstr("3 entries"));
}

TEST(BoxCopyTest, MatchesElementwiseReferenceForEveryElementSize) {
  std::mt19937 rng(5);
  for (DType t : {DType::kBool, DType::kInt16, DType::kFloat32, DType::kFloat64}) {
    for (int trial = 0; trial < 50; ++trial) {
      const int rank = static_cast<int>(rng() % 4) + 1;
      std::vector<int64_t> dims(rank);
      for (auto& d : dims) d = rng() % 5 + 1;
      Buffer whole = random_buffer(t, dims, rng());
      // A random source box, a random destination box, and a random region inside both.
      IndexBox src, dst, region;
      for (int d = 0; d < rank; ++d) {
        int64_t a = rng() % dims[d], b = rng() % dims[d];
        region.start.push_back(std::min(a, b));
        region.limit.push_back(std::max(a, b) + 1);
        src.start.push_back(rng() % (region.start[d] + 1));
        src.limit.push_back(region.limit[d] + rng() % (dims[d] - region.limit[d] + 1));
        dst.start.push_back(rng() % (region.start[d] + 1));
        dst.limit.push_back(region.limit[d] + rng() % (dims[d] - region.limit[d] + 1));
      }
      Buffer s = reference_slice(whole, src);
      Buffer out = random_buffer(t, dst.shape(), rng());
      Buffer expected = out.copy();
      copy_box(s, src, out, dst, region);
      // Expected: dst's slice with the region overwritten from whole.
      Buffer region_data = reference_slice(whole, region);
      IndexBox local{std::vector<int64_t>(rank), std::vector<int64_t>(rank)};
      for (int d = 0; d < rank; ++d) {
        local.start[d] = region.start[d] - dst.start[d];
        local.limit[d] = region.limit[d] - dst.start[d];
      }
      const size_t es = dtype_size(t);
      for (int64_t e = 0; e < region_data.num_elements(); ++e) {
        int64_t r = e, flat = 0;
        std::vector<int64_t> idx(rank);
        for (int d = rank - 1; d >= 0; --d) {
          idx[d] = local.start[d] + r % (local.limit[d] - local.start[d]);
          r /= local.limit[d] - local.start[d];
        }
        for (int d = 0; d < rank; ++d) flat = flat * dst.shape()[d] + idx[d];
        std::memcpy(static_cast<char*>(expected.mutable_data()) + flat * es,
                    static_cast<const char*>(region_data.data()) + e * es, es);
      }
      ASSERT_TRUE(out.bitwise_equal(expected)) << "src " << src.to_string() << " dst " << dst.to_string()
                                               << " region " << region.to_string();
    }
  }
}

}  // namespace
}  // namespace mcx
