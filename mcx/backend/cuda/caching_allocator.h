// Device memory for arrays: cached and stream-ordered, in the shape of PyTorch's CUDA caching allocator.
// cudaMalloc-style allocation synchronises the device and costs tens of microseconds, so memory is taken from
// the device in segments and kept: a freed block goes back to a cache and the next request of a fitting size
// reuses it, split from a larger block where that wastes little, merged with free neighbours when freed.
//
// Stream order: every block belongs to the stream it was allocated on. A block freed on its stream is
// reusable at once by later requests on that stream (their work runs after the work that used the block). A
// block also used on other streams (record_use) is reusable only once those streams' work enqueued before
// the free has finished: the free records an event on each, and the block waits until every event is done.
//
// Limits: at most `limit_bytes` are taken from the device (MCX_GPU_MEMORY_FRACTION of its memory, as JAX's
// XLA_PYTHON_CLIENT_MEM_FRACTION; docs/gpu.md). A request that does not fit first returns the cache's
// wholly free segments to the device, then fails with ResourceExhausted naming the request, the device, the
// memory in use, cached and reserved, and the limit; nothing already allocated is touched.
//
// Thread-safety: thread-safe (one mutex; the source is called under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "mcx/core/mutex.h"

namespace mcx::cuda {

// Where the allocator takes memory from and how it learns that a stream's work is done: the driver on a GPU
// (cuda_memory_source.h), host memory in tests. Streams and events are opaque handles.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  // `bytes` of device memory; ResourceExhausted when the device has no room.
  virtual absl::StatusOr<uint64_t> allocate(size_t bytes) = 0;
  virtual void release(uint64_t address, size_t bytes) = 0;
  // An event that completes when the work enqueued on `stream` so far has finished.
  virtual absl::StatusOr<uint64_t> record_event(uint64_t stream) = 0;
  virtual bool event_done(uint64_t event) = 0;
  virtual void destroy_event(uint64_t event) = 0;
};

struct AllocatorOptions {
  size_t limit_bytes = 0;   // most bytes reserved from the source at once (0: none)
  std::string device_name;  // in messages ("cuda:0")
  std::string limit_origin; // how the limit was set, in the out-of-memory message
};

struct AllocatorStats {
  size_t in_use = 0;              // bytes of live blocks (rounded sizes)
  size_t peak_in_use = 0;
  size_t requested = 0;           // bytes asked for by the live blocks
  size_t reserved = 0;            // bytes of segments taken from the source
  size_t peak_reserved = 0;
  size_t largest_free_block = 0;  // of the cached blocks reusable now
  int64_t allocations = 0;        // requests served
  int64_t cache_hits = 0;         // of them, served from cached blocks
  int64_t segments_allocated = 0;
  int64_t segments_released = 0;
  int64_t out_of_memory = 0;      // requests refused
  // Bytes reserved but not in use.
  size_t cached() const { return reserved - in_use; }
  // 1 - largest free block / cached bytes: 0 when the cache is one block (or empty), near 1 when it is in
  // pieces too small for a large request.
  double fragmentation() const;
};

class CachingAllocator {
 public:
  // Requests are rounded up to this many bytes (and blocks aligned to it).
  static constexpr size_t kRound = 512;
  // Requests up to kSmallRequest come from kSmallSegment segments; larger ones from segments of their size
  // rounded up to kLargeRound.
  static constexpr size_t kSmallRequest = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  CachingAllocator(DeviceMemorySource& source, AllocatorOptions options);
  // Returns every segment to the source (blocks still allocated are lost with their memory).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (> 0) for work on `stream`. ResourceExhausted as described above;
  // InvalidArgument for 0 bytes.
  absl::StatusOr<uint64_t> allocate(size_t bytes, uint64_t stream);
  // Work on `stream` (another than the block's) uses the block: its free waits for that work.
  // FailedPrecondition for an address this allocator did not hand out.
  absl::Status record_use(uint64_t address, uint64_t stream);
  // Gives the block back (stream order above). FailedPrecondition for an address not allocated here. When
  // an event cannot be recorded on a use stream, the block is never reused (its memory stays reserved) and
  // the error is returned.
  absl::Status free(uint64_t address);
  // Returns every wholly free segment to the source (also done before an allocation would fail).
  void release_cached();

  AllocatorStats stats() const;
  // The most bytes it may reserve (0: no limit).
  size_t limit_bytes() const { return options_.limit_bytes; }
  // The size a request is rounded up to.
  static size_t rounded(size_t bytes);

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& pool_for(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void collect_finished_frees() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void insert_free(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void take(Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* find_cached(size_t size, uint64_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Block*> new_segment(size_t size, uint64_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void release_free_segments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status out_of_memory(size_t bytes, size_t segment, const absl::Status& cause) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeviceMemorySource& source_;
  const AllocatorOptions options_;
  mutable Mutex mu_;
  FreeSet small_free_ ABSL_GUARDED_BY(mu_);
  FreeSet large_free_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Block*> allocated_ ABSL_GUARDED_BY(mu_);  // by address
  std::vector<Block*> pending_ ABSL_GUARDED_BY(mu_);  // freed, waiting for other streams' events
  std::vector<Block*> lost_ ABSL_GUARDED_BY(mu_);     // freed without an event: never reused
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mcx::cuda
