// The sampler and the DataLoader in one process with 8 CPU devices: exactly-once per epoch (drop and pad),
// identical global batches whatever the mesh, data-parallel and model-parallel placement, transforms'
// determinism, prefetch bounds, state/restore mid-epoch.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/data/loader.h"
#include "mcx/runtime/mesh.h"
#include "mcx/trace/placement.h"

namespace mcx::data {
namespace {

using ::testing::HasSubstr;

// n examples of f32[4]: example i is {i, i, i, i}; labels i32: i.
SourcePtr features(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) for (int k = 0; k < 4; ++k) v.push_back(static_cast<float>(i));
  return from_values<float>("features", {4}, v);
}
SourcePtr labels(int64_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return from_values<int32_t>("labels", {}, v);
}

TEST(InMemorySource, FromValuesTakesTypedVectorsAndChecksTheExampleCount) {
  const SourcePtr f = features(5);
  EXPECT_EQ(f->size(), 5);
  EXPECT_EQ(f->spec(), (ExampleSpec{DType::kFloat32, {4}}));
  std::vector<float> out(4);
  ASSERT_TRUE(f->read(3, std::as_writable_bytes(std::span<float>(out))).ok());
  EXPECT_EQ(out, (std::vector<float>{3, 3, 3, 3}));
  const SourcePtr l = labels(7);
  EXPECT_EQ(l->size(), 7);
  EXPECT_EQ(l->spec(), (ExampleSpec{DType::kInt32, {}}));
  try {
    from_values<float>("odd", {2, 3}, std::vector<float>(13));
    ADD_FAILURE() << "13 values made f32[2,3] examples";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected a whole number of f32[2,3] examples (a multiple of 6 values), found 13"));
  }
  EXPECT_THROW(from_values<float>("empty dim", {0}, std::vector<float>(4)), InvalidArgument);
}

TEST(Sampler, ExactlyOncePerEpochDropAndPad) {
  for (int64_t n : {1, 7, 10, 13, 100}) {
    for (int64_t b : {1, 3, 4, 8}) {
      for (Remainder rem : {Remainder::kDrop, Remainder::kPad}) {
        if (rem == Remainder::kDrop && n < b) continue;
        IndexSampler s(n, {b, 42, true, rem});
        for (int64_t epoch = 0; epoch < 2; ++epoch) {
          std::vector<int64_t> seen;
          for (int64_t k = 0; k < s.batches_per_epoch(); ++k) {
            for (int64_t i : s.batch(epoch, k * b)) if (i >= 0) seen.push_back(i);
          }
          std::set<int64_t> unique(seen.begin(), seen.end());
          EXPECT_EQ(unique.size(), seen.size()) << "n " << n << " b " << b;
          EXPECT_EQ(static_cast<int64_t>(seen.size()), rem == Remainder::kPad ? n : (n / b) * b);
          for (int64_t i : seen) EXPECT_TRUE(i >= 0 && i < n);
        }
      }
    }
  }
}

TEST(Sampler, SeededNewOrderPerEpoch) {
  IndexSampler a(1000, {10, 1}), b(1000, {10, 1}), c(1000, {10, 2});
  EXPECT_EQ(a.batch(0, 0), b.batch(0, 0));
  EXPECT_NE(a.batch(0, 0), a.batch(1, 0));
  EXPECT_NE(a.batch(0, 0), c.batch(0, 0));
  IndexSampler plain(10, {5, 0, false});
  EXPECT_EQ(plain.batch(3, 5), (std::vector<int64_t>{5, 6, 7, 8, 9}));
}

std::vector<int64_t> global_indices(const Batch& b) {
  const std::vector<int32_t> v = Array(device_get(b.fields[1])).to_vector<int32_t>();
  return std::vector<int64_t>(v.begin(), v.end());
}

TEST(Loader, SameGlobalBatchesForEveryMesh) {
  std::vector<std::vector<int64_t>> reference;
  for (int devices : {1, 2, 4, 8}) {
    Mesh mesh = make_mesh({devices}, {"data"});
    DataLoader loader({{"x", features(50), NamedSharding(mesh, P("data", None))},
                       {"y", labels(50), NamedSharding(mesh, P("data"))}},
                      {.global_batch = 8, .seed = 7, .num_epochs = 2, .workers = 3, .prefetch = 4});
    std::vector<std::vector<int64_t>> got;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->fields[0].dims(), (std::vector<int64_t>{8, 4}));
      EXPECT_EQ(static_cast<int>(b->fields[0].addressable_shards().size()), devices);
      const std::vector<float> x = Array(device_get(b->fields[0])).to_vector<float>();
      const std::vector<int64_t> y = global_indices(*b);
      for (size_t r = 0; r < y.size(); ++r) EXPECT_EQ(x[r * 4], static_cast<float>(y[r]));
      got.push_back(y);
    }
    EXPECT_EQ(got.size(), 12u);  // 2 epochs x 6 batches (2 examples dropped per epoch)
    if (reference.empty()) reference = got;
    EXPECT_EQ(got, reference) << devices << " devices";
  }
}

TEST(Loader, ModelParallelFeaturesSplitWithinTheProcess) {
  Mesh mesh = make_mesh({2, 2}, {"data", "model"});
  DataLoader loader({{"x", features(16), NamedSharding(mesh, P("data", "model"))},
                     {"y", labels(16), NamedSharding(mesh, P("data"))}},
                    {.global_batch = 4, .shuffle = false});
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  for (const ArrayShard& s : b->fields[0].addressable_shards()) {
    EXPECT_EQ(s.data.dims(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(s.data.to_vector<float>()[0], static_cast<float>(s.index.start[0]));
  }
  EXPECT_EQ(loader.plan().local_rows, 4);  // each row read once although two devices hold parts of it
}

TEST(Loader, PaddedLastBatchHasAMask) {
  Mesh mesh = make_mesh({2}, {"data"});
  DataLoader loader({{"x", features(10), NamedSharding(mesh, P("data", None))},
                     {"y", labels(10), NamedSharding(mesh, P("data"))}},
                    {.global_batch = 4, .remainder = Remainder::kPad, .num_epochs = 1});
  std::multiset<int64_t> seen;
  int batches = 0;
  while (auto b = loader.next()) {
    ++batches;
    ASSERT_TRUE(b->mask.has_value());
    const std::vector<float> mask = Array(device_get(*b->mask)).to_vector<float>();
    for (size_t r = 0; r < b->local_indices.size(); ++r) {
      EXPECT_EQ(mask[r], b->local_indices[r] >= 0 ? 1.0f : 0.0f);
      if (b->local_indices[r] >= 0) seen.insert(b->local_indices[r]);
    }
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
  EXPECT_FALSE(loader.next().has_value());  // the end stays the end
}

TEST(Loader, RestoreMidEpochContinuesWithTheUnseenExamples) {
  Mesh mesh = make_mesh({4}, {"data"});
  auto make = [&](int devices) {
    Mesh m = make_mesh({devices}, {"data"});
    return std::make_unique<DataLoader>(
        std::vector<Field>{{"x", features(40), NamedSharding(m, P("data", None))},
                           {"y", labels(40), NamedSharding(m, P("data"))}},
        LoaderOptions{.global_batch = 8, .seed = 3, .num_epochs = 2});
  };
  std::vector<std::vector<int64_t>> all;
  {
    auto full = make(4);
    while (auto b = full->next()) all.push_back(b->local_indices);
  }
  ASSERT_EQ(all.size(), 10u);
  std::string saved;
  {
    auto first = make(4);
    for (int k = 0; k < 3; ++k) first->next();
    saved = first->state().to_string();
    EXPECT_EQ(saved, "mcx-data-v1 seed=3 epoch=0 position=24 examples=40");
  }
  for (int devices : {4, 2, 8}) {  // same and different device counts
    auto resumed = make(devices);
    resumed->restore(parse_loader_state(saved).value());
    std::vector<std::vector<int64_t>> rest;
    while (auto b = resumed->next()) rest.push_back(b->local_indices);
    EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 3, all.end())) << devices;
  }
  auto other = make(4);
  LoaderState wrong = parse_loader_state(saved).value();
  wrong.seed = 9;
  EXPECT_THROW(other->restore(wrong), InvalidArgument);
  EXPECT_FALSE(parse_loader_state("mcx-data-v1 epoch=1").ok());
}

TEST(Loader, TransformsAreDeterministicPerExample) {
  Mesh mesh = make_mesh({2}, {"data"});
  // 3x3 u8 images; flip + crop must give the same bytes whatever the worker count.
  std::vector<std::byte> img(20 * 9);
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<std::byte>(i % 251);
  SourcePtr images = from_bytes("img", {DType::kUInt8, {3, 3}}, 20, img);
  std::vector<float> reference;
  for (int workers : {1, 4}) {
    DataLoader loader({{"img", images, NamedSharding(mesh, P("data", None, None)),
                        {random_crop(1), random_flip(1), normalize(0.5f, 0.25f)}}},
                      {.global_batch = 20, .seed = 5, .num_epochs = 1, .workers = workers});
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->fields[0].dtype(), DType::kFloat32);
    const std::vector<float> v = Array(device_get(b->fields[0])).to_vector<float>();
    if (reference.empty()) reference = v;
    EXPECT_EQ(v, reference);
  }
  EXPECT_THROW(DataLoader({{"img", images, NamedSharding(mesh, P("data", None, None)), {random_flip(5)}}},
                          {.global_batch = 2}),
               InvalidArgument);
}

TEST(Loader, BadDataSurfacesFromNextNamingTheSource) {
  struct Failing final : Source {
    int64_t size() const override { return 10; }
    ExampleSpec spec() const override { return {DType::kInt32, {}}; }
    std::string name() const override { return "failing.bin"; }
    absl::Status read(int64_t index, std::span<std::byte> out) const override {
      if (index == 7) return absl::DataLossError("[data] failing.bin: record 7: bad checksum");
      std::memset(out.data(), 0, out.size());
      return absl::OkStatus();
    }
  };
  Mesh mesh = make_mesh({1}, {"data"});
  DataLoader loader({{"y", std::make_shared<Failing>(), NamedSharding(mesh, P("data"))}},
                    {.global_batch = 10, .shuffle = false});
  try {
    loader.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("failing.bin: record 7"));
  }
}

TEST(Loader, PrefetchRunsAheadAndReportsWaits) {
  Mesh mesh = make_mesh({2}, {"data"});
  DataLoader loader({{"x", features(64), NamedSharding(mesh, P("data", None))}},
                    {.global_batch = 8, .workers = 2, .prefetch = 3, .max_prefetch_bytes = 1});
  for (int k = 0; k < 20; ++k) ASSERT_TRUE(loader.next().has_value());  // endless: 20 batches over 2.5 epochs
  EXPECT_EQ(loader.stats().batches, 20);
  EXPECT_EQ(loader.state().epoch, 2);
  EXPECT_EQ(loader.state().position, 32);
}

}  // namespace
}  // namespace mcx::data
