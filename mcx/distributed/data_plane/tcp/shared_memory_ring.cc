#include "mcx/distributed/data_plane/tcp/shared_memory_ring.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace mcx::distributed {

struct SharedMemoryRing::Header {
  alignas(64) std::atomic<uint64_t> written;  // producer's position
  alignas(64) std::atomic<uint64_t> read;     // consumer's position
  alignas(64) std::atomic<uint32_t> consumer_waiting;
  std::atomic<uint32_t> producer_waiting;
};
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "the ring's positions must be lock-free 64-bit atomics (shared between processes)");
static_assert(std::atomic<uint32_t>::is_always_lock_free);

size_t shared_memory_ring_bytes(size_t capacity) { return sizeof(SharedMemoryRing::Header) + capacity; }

SharedMemoryRing::SharedMemoryRing(void* memory, size_t capacity, bool initialize)
    : header_(static_cast<Header*>(memory)), data_(static_cast<char*>(memory) + sizeof(Header)), capacity_(capacity) {
  if (initialize) header_ = new (memory) Header{};
}

void SharedMemoryRing::copy_in(uint64_t at, const void* data, size_t n) {
  const size_t off = static_cast<size_t>(at & (capacity_ - 1));
  const size_t first = std::min(n, capacity_ - off);
  std::memcpy(data_ + off, data, first);
  if (n > first) std::memcpy(data_, static_cast<const char*>(data) + first, n - first);
}

size_t SharedMemoryRing::write(const void* a, size_t an, const void* b, size_t bn, bool* wake) {
  const uint64_t w = header_->written.load(std::memory_order_relaxed);
  const uint64_t r = header_->read.load(std::memory_order_acquire);
  const size_t room = capacity_ - static_cast<size_t>(w - r);
  const size_t take_a = std::min(an, room);
  const size_t take_b = std::min(bn, room - take_a);
  *wake = false;
  if (take_a + take_b == 0) return 0;
  if (take_a > 0) copy_in(w, a, take_a);
  if (take_b > 0) copy_in(w + take_a, b, take_b);
  header_->written.store(w + take_a + take_b, std::memory_order_seq_cst);
  *wake = header_->consumer_waiting.load(std::memory_order_seq_cst) != 0 &&
          header_->consumer_waiting.exchange(0, std::memory_order_seq_cst) != 0;
  return take_a + take_b;
}

size_t SharedMemoryRing::read(void* data, size_t n, bool* wake) {
  const uint64_t r = header_->read.load(std::memory_order_relaxed);
  const uint64_t w = header_->written.load(std::memory_order_acquire);
  const size_t take = std::min(n, static_cast<size_t>(w - r));
  *wake = false;
  if (take == 0) return 0;
  const size_t at = static_cast<size_t>(r & (capacity_ - 1));
  const size_t first = std::min(take, capacity_ - at);
  std::memcpy(data, data_ + at, first);
  if (take > first) std::memcpy(static_cast<char*>(data) + first, data_, take - first);
  header_->read.store(r + take, std::memory_order_seq_cst);
  *wake = header_->producer_waiting.load(std::memory_order_seq_cst) != 0 &&
          header_->producer_waiting.exchange(0, std::memory_order_seq_cst) != 0;
  return take;
}

bool SharedMemoryRing::consumer_may_sleep() {
  header_->consumer_waiting.store(1, std::memory_order_seq_cst);
  if (header_->written.load(std::memory_order_seq_cst) == header_->read.load(std::memory_order_relaxed)) return true;
  header_->consumer_waiting.store(0, std::memory_order_relaxed);
  return false;
}

bool SharedMemoryRing::producer_may_sleep() {
  header_->producer_waiting.store(1, std::memory_order_seq_cst);
  const uint64_t w = header_->written.load(std::memory_order_relaxed);
  if (w - header_->read.load(std::memory_order_seq_cst) == capacity_) return true;
  header_->producer_waiting.store(0, std::memory_order_relaxed);
  return false;
}

bool SharedMemoryRing::full() const {
  return header_->written.load(std::memory_order_relaxed) - header_->read.load(std::memory_order_acquire) == capacity_;
}

bool SharedMemoryRing::empty() const {
  return header_->written.load(std::memory_order_acquire) == header_->read.load(std::memory_order_acquire);
}

}  // namespace mcx::distributed
