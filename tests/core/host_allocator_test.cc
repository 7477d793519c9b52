#include "mcx/core/host_allocator.h"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mcx {
namespace {

TEST(HostAllocator, SizeClassesCoverTheRequestWithAtMostAQuarterToSpare) {
  size_t previous = 0;
  for (size_t bytes = kHostCacheMinBytes; bytes < (size_t{64} << 20); bytes = bytes * 9 / 8 + 4093) {
    const size_t cls = host_size_class(bytes);
    EXPECT_GE(cls, bytes);
    EXPECT_LE(cls, bytes + bytes / 4) << bytes;
    EXPECT_GE(cls, previous) << "classes grow with the request";
    EXPECT_EQ(host_size_class(cls), cls) << "a class is its own class";
    previous = cls;
  }
  EXPECT_EQ(host_size_class(1), kHostCacheMinBytes);
}

TEST(HostAllocator, ReusesAFreedBlockOfTheSameClass) {
  HostBlockCache cache(64 << 20);
  void* a = cache.allocate(1 << 20);
  std::memset(a, 1, 1 << 20);
  cache.free(a, 1 << 20);
  EXPECT_EQ(cache.stats().cached_bytes, int64_t{1} << 20);
  void* b = cache.allocate((1 << 20) - 100);  // same class
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().cached_bytes, 0);
  void* c = cache.allocate(3 << 20);  // another class: a miss
  EXPECT_NE(c, b);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % kHostAlignment, 0u);
  cache.free(b, (1 << 20) - 100);
  cache.free(c, 3 << 20);
}

TEST(HostAllocator, HoldsNoMoreThanItsLimitAndSmallBlocksBypassIt) {
  HostBlockCache cache(int64_t{3} << 20);
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(cache.allocate(1 << 20));
  for (void* p : blocks) cache.free(p, 1 << 20);
  EXPECT_EQ(cache.stats().cached_bytes, int64_t{3} << 20) << "two of the five went back to the C library";
  void* small = cache.allocate(1000);
  cache.free(small, 1000);
  EXPECT_EQ(cache.stats().cached_bytes, int64_t{3} << 20);
  EXPECT_EQ(cache.stats().hits + cache.stats().misses, 5) << "small blocks are not counted";
  cache.release();
  EXPECT_EQ(cache.stats().cached_bytes, 0);
}

TEST(HostAllocator, ZeroLimitCachesNothing) {
  HostBlockCache cache(0);
  void* p = cache.allocate(1 << 20);
  cache.free(p, 1 << 20);
  EXPECT_EQ(cache.stats().cached_bytes, 0);
  EXPECT_EQ(cache.stats().hits + cache.stats().misses, 0);
}

TEST(HostAllocator, ConcurrentAllocateAndFreeKeepBlocksDistinct) {
  HostBlockCache cache(int64_t{32} << 20);
  std::vector<std::thread> threads;
  std::vector<char> ok(4, 1);  // not vector<bool>: its bits share words between threads
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t bytes = (size_t{256} << 10) * (1 + (i + t) % 3);
        auto* p = static_cast<unsigned char*>(cache.allocate(bytes));
        std::memset(p, t + 1, bytes);
        for (size_t k = 0; k < bytes; k += 4096) ok[t] = ok[t] && p[k] == t + 1;  // nobody else wrote here
        cache.free(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]) << "thread " << t;
}

}  // namespace
}  // namespace mcx
