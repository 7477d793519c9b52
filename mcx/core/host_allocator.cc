#include "mcx/core/host_allocator.h"

#include <atomic>
#include <bit>
#include <new>

#include "mcx/core/config.h"

namespace mcx {

namespace {

// Rounded up to whole alignment units (kernels may read a vector past the last element; at least one unit).
void* raw_allocate(size_t bytes) {
  const size_t rounded = bytes == 0 ? kHostAlignment : (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  return ::operator new(rounded, std::align_val_t{kHostAlignment});
}
void raw_free(void* p) { ::operator delete(p, std::align_val_t{kHostAlignment}); }

}  // namespace

void* HostBlockCache::allocate(size_t bytes) {
  if (limit_ == 0 || bytes < kHostCacheMinBytes) return raw_allocate(bytes);
  const size_t cls = host_size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= static_cast<int64_t>(cls);
      ++hits_;
      return p;
    }
    ++misses_;
  }
  try {
    return raw_allocate(cls);
  } catch (const std::bad_alloc&) {
    release();
    return raw_allocate(cls);
  }
}

void HostBlockCache::free(void* block, size_t bytes) {
  if (block == nullptr) return;
  if (limit_ == 0 || bytes < kHostCacheMinBytes) return raw_free(block);
  const size_t cls = host_size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + static_cast<int64_t>(cls) <= limit_) {
      free_[cls].push_back(block);
      cached_ += static_cast<int64_t>(cls);
      return;
    }
  }
  raw_free(block);
}

void HostBlockCache::release() {
  std::map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_);
    cached_ = 0;
  }
  for (auto& [cls, list] : blocks) {
    for (void* p : list) raw_free(p);
  }
}

HostCacheStats HostBlockCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return HostCacheStats{hits_, misses_, cached_, limit_};
}

namespace {

HostBlockCache& process_cache() {
#ifdef MCX_SANITIZER_BUILD
  static HostBlockCache* c = new HostBlockCache(0);  // sanitizers see every use after free
#else
  // Never destroyed: buffers may be freed during exit. Made at the first allocation, after static init.
  static HostBlockCache* c = new HostBlockCache(kHostCacheMbFlag.get().value_or(1024) << 20);
#endif
  return *c;
}

}  // namespace

size_t host_size_class(size_t bytes) {
  if (bytes <= kHostCacheMinBytes) return kHostCacheMinBytes;
  // The power of two at or below bytes, split in four: classes 4q, 5q, 6q, 7q with q = 2^k / 4.
  const size_t top = std::bit_floor(bytes);
  const size_t quarter = top / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

namespace {
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_live_bytes{0};

void raise_peak(int64_t live) {
  int64_t peak = peak_live_bytes.load(std::memory_order_relaxed);
  while (live > peak && !peak_live_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}
}  // namespace

void* host_allocate(size_t bytes) {
  void* block = process_cache().allocate(bytes);
  raise_peak(live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) + static_cast<int64_t>(bytes));
  return block;
}
void host_free(void* block, size_t bytes) {
  process_cache().free(block, bytes);
  live_bytes.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}
HostMemoryStats host_memory_stats() {
  return {live_bytes.load(std::memory_order_relaxed), peak_live_bytes.load(std::memory_order_relaxed)};
}
void reset_host_memory_peak() { peak_live_bytes.store(live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace mcx
