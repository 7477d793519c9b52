// Host memory for array buffers: 64-byte aligned blocks, with large blocks reused instead of returned to the
// C library. Why: a training step allocates and frees the same large buffers every step, and glibc hands big
// blocks back to the kernel (mmap'd chunks, trimmed per-thread heaps), so every step page-faults them in again
// and zeroes them. Measured on the data-parallel MLP step (784-512-512-10, batch 256, 1 process x 2 devices):
// 44 ms a step without the cache, 13 ms with it; page faults were 27% of the profile (docs/benchmarks.md).
//
// Policy: blocks of at least kHostCacheMinBytes are rounded up to a size class (a power of two split into
// four steps, so at most 25% is wasted) and a freed block is kept on its class's free list while the cache
// holds less than MCX_HOST_CACHE_MB megabytes (default 1024; 0 disables the cache); beyond that it is
// released. Smaller blocks go straight to the C library, whose bins already reuse them. Builds with
// sanitizers (MCX_SANITIZER_BUILD) do not cache, so AddressSanitizer still sees every use after free.
//
// Thread-safety: all functions may be called from any thread. The cache is process-wide and never destroyed
// (blocks may be freed during exit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace mcx {

inline constexpr size_t kHostAlignment = 64;
inline constexpr size_t kHostCacheMinBytes = 128 << 10;

struct HostCacheStats {
  int64_t hits = 0;           // allocations served from the cache
  int64_t misses = 0;         // cacheable allocations that had to ask the C library
  int64_t cached_bytes = 0;   // held on free lists now
  int64_t limit_bytes = 0;    // the most it holds (0: caching is off)
};

// The cache itself (one process-wide instance backs host_allocate; tests make their own).
class HostBlockCache {
 public:
  explicit HostBlockCache(int64_t limit_bytes) : limit_(limit_bytes) {}
  ~HostBlockCache() { release(); }
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  void* allocate(size_t bytes);
  void free(void* block, size_t bytes);
  void release();
  HostCacheStats stats();

 private:
  const int64_t limit_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // guarded by mu_: size class -> blocks
  int64_t cached_ = 0;                         // guarded by mu_
  int64_t hits_ = 0, misses_ = 0;              // guarded by mu_
};

// A block of at least `bytes` bytes (0 allowed), aligned to kHostAlignment, from the process-wide cache
// (sized by MCX_HOST_CACHE_MB when first used). Throws std::bad_alloc like operator new when memory runs out
// (after releasing the cache and retrying once).
void* host_allocate(size_t bytes);

// Returns a block from host_allocate; `bytes` must be the size it was asked for.
void host_free(void* block, size_t bytes);

// The bytes of array storage in use: asked for through host_allocate and not yet returned (blocks held by the
// cache for reuse are not in use), and the most that was in use at once since the process started or since
// the last reset_host_memory_peak(). What a program's peak memory is measured by (e.g. with and without
// mcx::remat). Counts requested bytes, before rounding to size classes.
struct HostMemoryStats {
  int64_t live_bytes = 0;
  int64_t peak_live_bytes = 0;
};
HostMemoryStats host_memory_stats();
// Sets the peak to the bytes in use now.
void reset_host_memory_peak();

// The size class a cacheable request is rounded up to.
size_t host_size_class(size_t bytes);

}  // namespace mcx
