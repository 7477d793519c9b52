// SharedMemoryRing (data_plane/tcp/shared_memory_ring.h) in ordinary memory: every write and read against a
// byte-queue model (what fits, what wraps, header and body written as one), the waiting flags, and a producer
// and a consumer thread moving a long stream through a small ring (run under ThreadSanitizer by
// scripts/sanitize.sh, which checks the memory orders).
#include "mcx/distributed/data_plane/tcp/shared_memory_ring.h"

#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace mcx::distributed {
namespace {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

// A ring of `capacity` bytes in memory of its own.
class TestRing {
 public:
  explicit TestRing(size_t capacity)
      : memory_(std::aligned_alloc(64, (shared_memory_ring_bytes(capacity) + 63) / 64 * 64)),
        ring_(memory_.get(), capacity, /*initialize=*/true) {}
  SharedMemoryRing& operator*() { return ring_; }
  SharedMemoryRing* operator->() { return &ring_; }

 private:
  std::unique_ptr<void, AlignedFree> memory_;
  SharedMemoryRing ring_;
};

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> out(n);
  std::mt19937 gen(seed);
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

// Random writes of one or two pieces and random reads through a 64-byte ring, against a byte queue: each
// call moves what fits (room for writes, what is there for reads), in order, across the wrap.
TEST(SharedMemoryRing, MovesWhatFitsInOrderAcrossTheWrap) {
  TestRing ring(64);
  std::deque<char> model;
  std::mt19937 gen(7);
  for (int step = 0; step < 20000; ++step) {
    if (gen() % 2 == 0) {
      const std::vector<char> a = pattern(gen() % 40, static_cast<uint32_t>(step));
      const std::vector<char> b = pattern(gen() % 40, static_cast<uint32_t>(step) + 1000003u);
      const bool two = gen() % 2 == 0;
      bool wake = true;
      const size_t room = 64 - model.size();
      const size_t wrote = two ? ring->write(a.data(), a.size(), b.data(), b.size(), &wake)
                               : ring->write(a.data(), a.size(), &wake);
      const size_t wanted = a.size() + (two ? b.size() : 0);
      ASSERT_EQ(wrote, std::min(wanted, room)) << "step " << step;
      EXPECT_FALSE(wake);  // nobody waits here
      for (size_t k = 0; k < wrote; ++k) model.push_back(k < a.size() ? a[k] : b[k - a.size()]);
    } else {
      std::vector<char> got(gen() % 80);
      bool wake = true;
      const size_t read = ring->read(got.data(), got.size(), &wake);
      ASSERT_EQ(read, std::min(got.size(), model.size())) << "step " << step;
      EXPECT_FALSE(wake);
      for (size_t k = 0; k < read; ++k) {
        ASSERT_EQ(got[k], model.front()) << "step " << step << " byte " << k;
        model.pop_front();
      }
    }
    ASSERT_EQ(ring->empty(), model.empty());
    ASSERT_EQ(ring->full(), model.size() == 64);
  }
}

// A side that finds nothing to do raises its flag (may sleep); the other side's next move takes it down and
// says to wake it, once.
TEST(SharedMemoryRing, ASleeperIsWokenOnceByTheNextMove) {
  TestRing ring(16);
  char buf[32] = {};
  bool wake = false;
  EXPECT_TRUE(ring->consumer_may_sleep());  // empty: sleep
  EXPECT_EQ(ring->write(buf, 4, buf, 4, &wake), 8u);
  EXPECT_TRUE(wake);
  EXPECT_EQ(ring->write(buf, 1, &wake), 1u);
  EXPECT_FALSE(wake);                        // already woken
  EXPECT_FALSE(ring->consumer_may_sleep());  // bytes are there: go on
  EXPECT_EQ(ring->write(buf, 32, &wake), 7u);  // what fits
  EXPECT_FALSE(wake);                          // its flag went down again
  EXPECT_TRUE(ring->producer_may_sleep());     // full: sleep
  EXPECT_EQ(ring->write(buf, 1, &wake), 0u);
  EXPECT_EQ(ring->read(buf, 3, &wake), 3u);
  EXPECT_TRUE(wake);
  EXPECT_FALSE(ring->producer_may_sleep());  // room now
}

// A producer thread writes 4 MiB as header + body pairs of random sizes, a consumer thread reads it back in
// random sizes, both spinning on the ring (no sleeping): the bytes arrive whole and in order.
TEST(SharedMemoryRing, AProducerAndAConsumerThreadMoveAStreamIntact) {
  TestRing ring(4096);
  const std::vector<char> stream = pattern(4 << 20, 11);
  std::thread producer([&] {
    std::mt19937 gen(1);
    size_t at = 0;
    while (at < stream.size()) {
      const size_t a = std::min<size_t>(gen() % 17, stream.size() - at);
      const size_t b = std::min<size_t>(gen() % 9000, stream.size() - at - a);
      size_t done = 0;
      while (done < a + b) {
        bool wake = false;
        const size_t head = done < a ? a - done : 0;
        const size_t body_at = done > a ? done - a : 0;
        done += ring->write(stream.data() + at + (a - head), head, stream.data() + at + a + body_at, b - body_at,
                            &wake);
      }
      at += a + b;
    }
  });
  std::vector<char> got(stream.size());
  std::mt19937 gen(2);
  size_t at = 0;
  while (at < got.size()) {
    bool wake = false;
    at += ring->read(got.data() + at, std::min<size_t>(1 + gen() % 6000, got.size() - at), &wake);
  }
  producer.join();
  EXPECT_TRUE(got == stream);
  EXPECT_TRUE(ring->empty());
}

}  // namespace
}  // namespace mcx::distributed
