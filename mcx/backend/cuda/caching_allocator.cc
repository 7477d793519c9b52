#include "mcx/backend/cuda/caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mcx/core/error.h"

namespace mcx::cuda {

struct CachingAllocator::Block {
  enum class State { kFree, kAllocated, kPending };
  uint64_t address = 0;
  size_t size = 0;
  uint64_t stream = 0;
  bool small = false;  // from a small segment (its pool is the small one whatever its size)
  State state = State::kFree;
  size_t requested = 0;
  size_t segment_size = 0;  // on a segment's first block: the segment's size
  Block* prev = nullptr;    // neighbours in the segment
  Block* next = nullptr;
  std::vector<uint64_t> use_streams;  // other streams that used it since it was allocated
  std::vector<uint64_t> events;       // while pending: one per use stream
};

namespace {

std::string bytes_text(size_t b) {
  const double v = static_cast<double>(b);
  if (b >= (size_t{1} << 30)) return absl::StrFormat("%.2f GiB", v / (1 << 30));
  if (b >= (size_t{1} << 20)) return absl::StrFormat("%.1f MiB", v / (1 << 20));
  if (b >= (size_t{1} << 10)) return absl::StrFormat("%.1f KiB", v / (1 << 10));
  return absl::StrCat(b, " B");
}

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

double AllocatorStats::fragmentation() const {
  const size_t c = cached();
  return c == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(c);
}

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

size_t CachingAllocator::rounded(size_t bytes) { return round_up(std::max<size_t>(bytes, 1), kRound); }

CachingAllocator::CachingAllocator(DeviceMemorySource& source, AllocatorOptions options)
    : source_(source), options_(std::move(options)) {}

CachingAllocator::~CachingAllocator() {
  MutexLock lock(&mu_);
  std::vector<Block*> all(small_free_.begin(), small_free_.end());
  all.insert(all.end(), large_free_.begin(), large_free_.end());
  for (auto& [address, b] : allocated_) all.push_back(b);
  all.insert(all.end(), pending_.begin(), pending_.end());
  all.insert(all.end(), lost_.begin(), lost_.end());
  for (Block* b : all) {
    for (uint64_t e : b->events) source_.destroy_event(e);
    if (b->prev == nullptr) source_.release(b->address, b->segment_size);
  }
  for (Block* b : all) delete b;
}

CachingAllocator::FreeSet& CachingAllocator::pool_for(size_t size) {
  return size <= kSmallRequest ? small_free_ : large_free_;
}

void CachingAllocator::insert_free(Block* b) {
  b->state = Block::State::kFree;
  b->use_streams.clear();
  auto absorb = [&](Block* left, Block* right) {  // right joins left; both free, right out of its pool
    left->size += right->size;
    left->next = right->next;
    if (right->next != nullptr) right->next->prev = left;
    delete right;
  };
  if (b->prev != nullptr && b->prev->state == Block::State::kFree) {
    Block* p = b->prev;
    (p->small ? small_free_ : large_free_).erase(p);
    absorb(p, b);
    b = p;
  }
  if (b->next != nullptr && b->next->state == Block::State::kFree) {
    (b->next->small ? small_free_ : large_free_).erase(b->next);
    absorb(b, b->next);
  }
  (b->small ? small_free_ : large_free_).insert(b);
}

void CachingAllocator::collect_finished_frees() {
  auto finished = [&](Block* b) {
    for (uint64_t e : b->events) {
      if (!source_.event_done(e)) return false;
    }
    for (uint64_t e : b->events) source_.destroy_event(e);
    b->events.clear();
    return true;
  };
  std::vector<Block*> still;
  for (Block* b : pending_) {
    if (finished(b)) {
      insert_free(b);
    } else {
      still.push_back(b);
    }
  }
  pending_ = std::move(still);
}

CachingAllocator::Block* CachingAllocator::find_cached(size_t size, uint64_t stream) {
  FreeSet& pool = pool_for(size);
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void CachingAllocator::release_free_segments() {
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      source_.release(b->address, b->segment_size);
      stats_.reserved -= b->segment_size;
      ++stats_.segments_released;
      delete b;
    }
  }
}

absl::Status CachingAllocator::out_of_memory(size_t bytes, size_t segment, const absl::Status& cause) {
  ++stats_.out_of_memory;
  std::string limit;
  if (options_.limit_bytes > 0) {
    limit = absl::StrCat(" of a limit of ", bytes_text(options_.limit_bytes),
                         options_.limit_origin.empty() ? "" : absl::StrCat(" (", options_.limit_origin, ")"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of memory on ", options_.device_name.empty() ? "the device" : options_.device_name, ": cannot allocate ",
      bytes_text(bytes), segment > rounded(bytes) ? absl::StrCat(" (a new ", bytes_text(segment), " segment)") : "",
      "; ", bytes_text(stats_.in_use), " in use, ", bytes_text(stats_.cached()),
      " cached in blocks that do not fit or belong to other streams, ", bytes_text(stats_.reserved), " reserved",
      limit, cause.ok() ? "" : absl::StrCat("; the device refused: ", cause.message())));
}

absl::StatusOr<CachingAllocator::Block*> CachingAllocator::new_segment(size_t size, uint64_t stream) {
  const bool small = size <= kSmallRequest;
  const size_t segment = small ? kSmallSegment : round_up(size, kLargeRound);
  if (options_.limit_bytes > 0 && stats_.reserved + segment > options_.limit_bytes) release_free_segments();
  if (options_.limit_bytes > 0 && stats_.reserved + segment > options_.limit_bytes) {
    return out_of_memory(size, segment, absl::OkStatus());
  }
  absl::StatusOr<uint64_t> address = source_.allocate(segment);
  if (!address.ok()) {
    release_free_segments();
    address = source_.allocate(segment);
    if (!address.ok()) return out_of_memory(size, segment, address.status());
  }
  auto* b = new Block;
  b->address = *address;
  b->size = segment;
  b->segment_size = segment;
  b->stream = stream;
  b->small = small;
  stats_.reserved += segment;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.segments_allocated;
  return b;
}

absl::StatusOr<uint64_t> CachingAllocator::allocate(size_t bytes, uint64_t stream) {
  if (bytes == 0) return absl::InvalidArgumentError("device allocation of 0 bytes");
  const size_t size = rounded(bytes);
  MutexLock lock(&mu_);
  collect_finished_frees();
  Block* b = find_cached(size, stream);
  if (b != nullptr) {
    ++stats_.cache_hits;
  } else {
    MCX_ASSIGN_OR_RETURN(b, new_segment(size, stream));
  }
  b->state = Block::State::kAllocated;  // before the split, so the rest does not merge back into it
  // Split off the rest where it is worth keeping: any remainder in a small segment, more than a small
  // request's worth in a large one (a smaller rest would only fragment the large pool).
  const size_t rest = b->size - size;
  if (b->small ? rest >= kRound : rest > kSmallRequest) {
    auto* r = new Block;
    r->address = b->address + size;
    r->size = rest;
    r->stream = b->stream;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    insert_free(r);
  }
  b->requested = bytes;
  allocated_[b->address] = b;
  ++stats_.allocations;
  stats_.in_use += b->size;
  stats_.requested += bytes;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return b->address;
}

absl::Status CachingAllocator::record_use(uint64_t address, uint64_t stream) {
  MutexLock lock(&mu_);
  auto it = allocated_.find(address);
  if (it == allocated_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat("record_use of 0x%x: not a live allocation", address));
  }
  Block* b = it->second;
  if (stream != b->stream && std::find(b->use_streams.begin(), b->use_streams.end(), stream) == b->use_streams.end()) {
    b->use_streams.push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status CachingAllocator::free(uint64_t address) {
  MutexLock lock(&mu_);
  auto it = allocated_.find(address);
  if (it == allocated_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat("free of 0x%x: not a live allocation", address));
  }
  Block* b = it->second;
  allocated_.erase(it);
  stats_.in_use -= b->size;
  stats_.requested -= b->requested;
  if (b->use_streams.empty()) {
    insert_free(b);
    return absl::OkStatus();
  }
  b->state = Block::State::kPending;
  pending_.push_back(b);
  for (uint64_t s : b->use_streams) {
    absl::StatusOr<uint64_t> e = source_.record_event(s);
    if (!e.ok()) {
      // Never reused: no event tells when that stream is done with it.
      pending_.pop_back();
      for (uint64_t recorded : b->events) source_.destroy_event(recorded);
      b->events.clear();
      lost_.push_back(b);
      return absl::Status(e.status().code(),
                          absl::StrFormat("free of 0x%x: cannot record an event on a stream that used it, so the "
                                          "block is kept out of the cache: %s",
                                          address, e.status().message()));
    }
    b->events.push_back(*e);
  }
  return absl::OkStatus();
}

void CachingAllocator::release_cached() {
  MutexLock lock(&mu_);
  collect_finished_frees();
  release_free_segments();
}

AllocatorStats CachingAllocator::stats() const {
  MutexLock lock(&mu_);
  AllocatorStats s = stats_;
  s.largest_free_block = 0;
  for (const FreeSet* pool : {&small_free_, &large_free_}) {
    for (const Block* b : *pool) s.largest_free_block = std::max(s.largest_free_block, b->size);
  }
  return s;
}

}  // namespace mcx::cuda
