// The caching allocator over a host stand-in for device memory (addresses only, every live range checked for
// overlap; events completed by the test): reuse, splitting and merging, stream order, the limit and its
// message, the device refusing, statistics and fragmentation, many threads at once.
#include <map>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/caching_allocator.h"
#include "mcx/core/mutex.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;
constexpr size_t kMiB = size_t{1} << 20;

// Segments handed out from a pretend address space of `capacity` bytes; checks that releases match.
class FakeDeviceMemory final : public DeviceMemorySource {
 public:
  explicit FakeDeviceMemory(size_t capacity) : capacity_(capacity) {}
  absl::StatusOr<uint64_t> allocate(size_t bytes) override {
    MutexLock lock(&mu_);
    if (used_ + bytes > capacity_) return absl::ResourceExhaustedError("CUDA_ERROR_OUT_OF_MEMORY");
    const uint64_t a = next_;
    next_ += bytes + 4096;  // gaps: segments never touch, so a merge across segments would show
    segments_[a] = bytes;
    used_ += bytes;
    return a;
  }
  void release(uint64_t address, size_t bytes) override {
    MutexLock lock(&mu_);
    auto it = segments_.find(address);
    ASSERT_NE(it, segments_.end()) << "release of an address that is not a segment";
    EXPECT_EQ(it->second, bytes);
    used_ -= bytes;
    segments_.erase(it);
  }
  absl::StatusOr<uint64_t> record_event(uint64_t stream) override {
    MutexLock lock(&mu_);
    if (stream == kBrokenStream) return absl::InternalError("CUDA_ERROR_LAUNCH_FAILED");
    const uint64_t e = ++last_event_;
    events_[e] = false;
    return e;
  }
  bool event_done(uint64_t event) override {
    MutexLock lock(&mu_);
    return events_.at(event);
  }
  void destroy_event(uint64_t event) override {
    MutexLock lock(&mu_);
    events_.erase(event);
  }
  void complete_all_events() {
    MutexLock lock(&mu_);
    for (auto& [e, done] : events_) done = true;
  }
  size_t live_segments() {
    MutexLock lock(&mu_);
    return segments_.size();
  }
  size_t live_events() {
    MutexLock lock(&mu_);
    return events_.size();
  }
  static constexpr uint64_t kBrokenStream = 99;

 private:
  Mutex mu_;
  const size_t capacity_;
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1 << 20;
  uint64_t last_event_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, size_t> segments_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, bool> events_ ABSL_GUARDED_BY(mu_);
};

AllocatorOptions named(size_t limit = 0) {
  return AllocatorOptions{.limit_bytes = limit, .device_name = "cuda:0", .limit_origin = "test limit"};
}

TEST(CachingAllocator, AFreedBlockIsReusedOnItsStream) {
  FakeDeviceMemory mem(1 << 30);
  CachingAllocator alloc(mem, named());
  const uint64_t a = alloc.allocate(1000, /*stream=*/1).value();
  ASSERT_TRUE(alloc.free(a).ok());
  EXPECT_EQ(alloc.allocate(900, 1).value(), a);  // same block, no new segment
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.segments_allocated, 1);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(s.requested, 900u);
  EXPECT_EQ(s.reserved, CachingAllocator::kSmallSegment);
  // Another stream does not get the block the first stream's work may still be using.
  EXPECT_NE(alloc.allocate(900, 2).value(), a);
  EXPECT_EQ(alloc.stats().segments_allocated, 2);
}

TEST(CachingAllocator, SmallBlocksSplitASegmentAndMergeBack) {
  FakeDeviceMemory mem(1 << 30);
  CachingAllocator alloc(mem, named());
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(alloc.allocate(512 * 1024, 1).value());
  for (int i = 1; i < 4; ++i) EXPECT_EQ(blocks[i], blocks[i - 1] + 512 * 1024);  // one segment, in order
  EXPECT_EQ(alloc.stats().segments_allocated, 1);
  ASSERT_TRUE(alloc.free(blocks[0]).ok());
  ASSERT_TRUE(alloc.free(blocks[2]).ok());
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.cached(), 1 * kMiB);
  EXPECT_EQ(s.largest_free_block, 512 * 1024u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.5);  // two separate halves of the cached megabyte
  ASSERT_TRUE(alloc.free(blocks[1]).ok());
  ASSERT_TRUE(alloc.free(blocks[3]).ok());
  s = alloc.stats();
  EXPECT_EQ(s.largest_free_block, CachingAllocator::kSmallSegment);  // merged back into one block
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  EXPECT_EQ(s.peak_in_use, 2 * kMiB);
  alloc.release_cached();
  EXPECT_EQ(mem.live_segments(), 0u);
  EXPECT_EQ(alloc.stats().reserved, 0u);
  EXPECT_EQ(alloc.stats().segments_released, 1);
}

TEST(CachingAllocator, LargeRequestsGetTheirOwnSegmentsAndSplitOnlyWorthwhileRests) {
  FakeDeviceMemory mem(size_t{1} << 34);
  CachingAllocator alloc(mem, named());
  const uint64_t a = alloc.allocate(10 * kMiB + 1, 1).value();  // a 12 MiB segment, the ~2 MiB rest split off
  EXPECT_EQ(alloc.stats().reserved, 12 * kMiB);
  EXPECT_EQ(alloc.stats().in_use, CachingAllocator::rounded(10 * kMiB + 1));
  const uint64_t b = alloc.allocate(1536 * 1024, 1).value();  // fits in the rest
  EXPECT_EQ(b, a + CachingAllocator::rounded(10 * kMiB + 1));
  EXPECT_EQ(alloc.stats().segments_allocated, 1);
  const uint64_t c = alloc.allocate(3 * kMiB, 1).value();  // a 4 MiB segment; the 1 MiB rest is not split off
  EXPECT_EQ(alloc.stats().reserved, 16 * kMiB);
  ASSERT_TRUE(alloc.free(c).ok());
  EXPECT_EQ(alloc.allocate(4 * kMiB, 1).value(), c);  // the whole 4 MiB block was kept together
}

TEST(CachingAllocator, ABlockUsedOnAnotherStreamWaitsForThatStreamsWork) {
  FakeDeviceMemory mem(1 << 30);
  CachingAllocator alloc(mem, named());
  const uint64_t a = alloc.allocate(4 * kMiB, 1).value();
  ASSERT_TRUE(alloc.record_use(a, 2).ok());
  ASSERT_TRUE(alloc.free(a).ok());
  EXPECT_EQ(mem.live_events(), 1u);
  const uint64_t b = alloc.allocate(4 * kMiB, 1).value();
  EXPECT_NE(b, a);  // stream 2's work may still read a
  ASSERT_TRUE(alloc.free(b).ok());
  mem.complete_all_events();
  const uint64_t c = alloc.allocate(4 * kMiB, 1).value();
  const uint64_t d = alloc.allocate(4 * kMiB, 1).value();
  EXPECT_THAT((std::vector<uint64_t>{std::min(c, d), std::max(c, d)}), ::testing::ElementsAre(std::min(a, b), std::max(a, b)));
  EXPECT_EQ(mem.live_events(), 0u);  // destroyed once done
  EXPECT_EQ(alloc.stats().segments_allocated, 2);
}

TEST(CachingAllocator, TheLimitFreesTheCacheFirstThenFailsWithAMessageThatSaysWhy) {
  FakeDeviceMemory mem(1 << 30);
  CachingAllocator alloc(mem, named(8 * kMiB));
  const uint64_t a = alloc.allocate(6 * kMiB, 1).value();
  absl::StatusOr<uint64_t> b = alloc.allocate(4 * kMiB, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("out of memory on cuda:0: cannot allocate 4.0 MiB; 6.0 MiB in use, 0 B cached"));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("6.0 MiB reserved of a limit of 8.0 MiB (test limit)"));
  EXPECT_EQ(alloc.stats().out_of_memory, 1);
  // Nothing allocated was touched; once a is freed, its cached segment (which another stream cannot use)
  // is returned to make room.
  ASSERT_TRUE(alloc.free(a).ok());
  ASSERT_TRUE(alloc.allocate(4 * kMiB, 2).ok());
  EXPECT_EQ(alloc.stats().segments_released, 1);
  EXPECT_EQ(alloc.stats().peak_reserved, 6 * kMiB);
}

TEST(CachingAllocator, WhenTheDeviceRefusesTheCacheIsReturnedAndTheRequestRetried) {
  FakeDeviceMemory mem(10 * kMiB);
  CachingAllocator alloc(mem, named());
  ASSERT_TRUE(alloc.free(alloc.allocate(8 * kMiB, 1).value()).ok());
  // Stream 2 cannot use stream 1's cached block; the device has 2 MiB left, so the cache goes back first.
  ASSERT_TRUE(alloc.allocate(6 * kMiB, 2).ok());
  EXPECT_EQ(alloc.stats().segments_released, 1);
  absl::StatusOr<uint64_t> big = alloc.allocate(6 * kMiB, 2);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("the device refused: CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST(CachingAllocator, BadCallsAreRefused) {
  FakeDeviceMemory mem(1 << 30);
  CachingAllocator alloc(mem, named());
  EXPECT_EQ(alloc.allocate(0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc.free(12345).code(), absl::StatusCode::kFailedPrecondition);
  const uint64_t a = alloc.allocate(100, 1).value();
  ASSERT_TRUE(alloc.free(a).ok());
  EXPECT_THAT(std::string(alloc.free(a).message()), HasSubstr("not a live allocation"));  // a second free
  EXPECT_EQ(alloc.record_use(a, 2).code(), absl::StatusCode::kFailedPrecondition);
  // A stream whose event cannot be recorded: the block is kept out of the cache, the error returned.
  const uint64_t b = alloc.allocate(4 * kMiB, 1).value();
  ASSERT_TRUE(alloc.record_use(b, FakeDeviceMemory::kBrokenStream).ok());
  absl::Status freed = alloc.free(b);
  EXPECT_EQ(freed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(freed.message()), HasSubstr("kept out of the cache"));
  EXPECT_NE(alloc.allocate(4 * kMiB, 1).value(), b);
}

TEST(CachingAllocator, TheDestructorReturnsEverySegment) {
  FakeDeviceMemory mem(1 << 30);
  {
    CachingAllocator alloc(mem, named());
    ASSERT_TRUE(alloc.allocate(100, 1).ok());
    ASSERT_TRUE(alloc.free(alloc.allocate(30 * kMiB, 2).value()).ok());
    const uint64_t p = alloc.allocate(5 * kMiB, 3).value();
    ASSERT_TRUE(alloc.record_use(p, 4).ok());
    ASSERT_TRUE(alloc.free(p).ok());  // pending
    EXPECT_EQ(mem.live_segments(), 3u);
  }
  EXPECT_EQ(mem.live_segments(), 0u);
  EXPECT_EQ(mem.live_events(), 0u);
}

// Threads allocating and freeing random sizes on their own streams: no two live blocks overlap, and
// everything comes back.
TEST(CachingAllocator, ManyThreadsNeverGetOverlappingBlocks) {
  FakeDeviceMemory mem(size_t{1} << 40);
  CachingAllocator alloc(mem, named());
  Mutex mu;
  std::map<uint64_t, uint64_t> live;  // start -> end
  bool overlap = false;
  auto worker = [&](int t) {
    std::mt19937_64 rng(t);
    std::vector<uint64_t> mine;
    for (int i = 0; i < 2000; ++i) {
      if (!mine.empty() && rng() % 2 == 0) {
        const size_t k = rng() % mine.size();
        {
          MutexLock lock(&mu);
          live.erase(mine[k]);
        }
        ASSERT_TRUE(alloc.free(mine[k]).ok());
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      const size_t bytes = rng() % 4 == 0 ? 1 + rng() % (8 * kMiB) : 1 + rng() % 100000;
      const uint64_t a = alloc.allocate(bytes, static_cast<uint64_t>(t % 2)).value();
      MutexLock lock(&mu);
      auto next = live.lower_bound(a);
      if (next != live.end() && next->first < a + bytes) overlap = true;
      if (next != live.begin() && std::prev(next)->second > a) overlap = true;
      live[a] = a + bytes;
      mine.push_back(a);
    }
    for (uint64_t a : mine) {
      {
        MutexLock lock(&mu);
        live.erase(a);
      }
      ASSERT_TRUE(alloc.free(a).ok());
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(overlap);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_GT(s.cache_hits, s.allocations / 2);  // the cache serves most requests
  alloc.release_cached();
  EXPECT_EQ(mem.live_segments(), 0u);
}

}  // namespace
}  // namespace mcx::cuda
