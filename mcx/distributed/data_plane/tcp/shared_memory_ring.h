// SharedMemoryRing: a single-producer single-consumer byte ring in memory shared by two processes of one host,
// the data path of a shared-memory link (shared_memory_link.h). The producer copies bytes in, the consumer copies
// them out; each side publishes its position with release stores and reads the other's with acquire loads, so
// the bytes between them are complete when seen. Positions are byte counts since the start (64-bit: they never
// wrap in practice); the ring holds at most capacity() bytes.
//
// Sleeping: a side that found nothing to do (the consumer an empty ring, the producer a full one) raises its
// waiting flag and looks again before it sleeps; the other side, after it moved bytes, takes the flag down and, if
// it was up, wakes the sleeper (the link rings a doorbell). Flag and position are sequentially consistent on both
// sides, so either the sleeper sees the bytes on its second look or the mover sees the flag: a wake-up is never
// lost.
//
// Layout (shared_memory_ring_bytes(capacity) bytes, 64-byte aligned): a header of three cache lines (the
// producer's position, the consumer's, the flags), then the data. Both processes map the same layout; the
// header is the only place either writes besides the data.
// Thread-safety: one producer thread and one consumer thread (in one process or two).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mcx::distributed {

// Bytes of a ring of `capacity` data bytes (header included).
size_t shared_memory_ring_bytes(size_t capacity);

class SharedMemoryRing {
 public:
  // `memory`: shared_memory_ring_bytes(capacity) bytes, 64-byte aligned. `initialize`: the creator zeroes the
  // header (the other side maps it as found). capacity must be a power of two.
  SharedMemoryRing(void* memory, size_t capacity, bool initialize);

  size_t capacity() const { return capacity_; }

  // Producer: copies up to n bytes in (what fits now); returns how many. wake: set when the consumer was
  // waiting (its flag taken down here), so the caller must wake it.
  size_t write(const void* data, size_t n, bool* wake) { return write(data, n, nullptr, 0, wake); }
  // The same for the bytes of `a` followed by those of `b`, published at once (a message's header and body).
  size_t write(const void* a, size_t an, const void* b, size_t bn, bool* wake);
  // Consumer: copies up to n bytes out (what is there now); returns how many. wake: set when the producer was
  // waiting for room.
  size_t read(void* data, size_t n, bool* wake);

  // Before sleeping: raises this side's flag and says whether there is still nothing to do (true: sleep; the
  // other side will wake it). False: bytes (or room) came meanwhile, the flag is down again, go on.
  bool consumer_may_sleep();
  bool producer_may_sleep();

  bool empty() const;
  bool full() const;

  struct Header;  // (shared_memory_ring.cc)

 private:
  // Copies n bytes in at position `at` (wrapping), without publishing them.
  void copy_in(uint64_t at, const void* data, size_t n);
  Header* header_;
  char* data_;
  size_t capacity_;
};

}  // namespace mcx::distributed
