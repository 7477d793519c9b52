#include "mcx/data/sampler.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/data/mix.h"

namespace mcx::data {
namespace {

constexpr int kRounds = 6;

}  // namespace

IndexSampler::IndexSampler(int64_t num_examples, SamplerOptions options) : n_(num_examples), options_(options) {
  if (options_.global_batch < 1) {
    throw InvalidArgument(absl::StrCat("[data] global batch size: expected >= 1, found ", options_.global_batch));
  }
  if (n_ < 0) throw InvalidArgument(absl::StrCat("[data] number of examples: expected >= 0, found ", n_));
  if (options_.remainder == Remainder::kDrop && n_ < options_.global_batch) {
    throw InvalidArgument(absl::StrCat("[data] drop-remainder with a global batch of ", options_.global_batch,
                                       ": expected at least that many examples, found ", n_));
  }
  while ((int64_t{1} << (2 * half_bits_)) < n_) ++half_bits_;
  if (half_bits_ == 0) half_bits_ = 1;
}

int64_t IndexSampler::batches_per_epoch() const {
  const int64_t b = options_.global_batch;
  return options_.remainder == Remainder::kDrop ? n_ / b : (n_ + b - 1) / b;
}

int64_t IndexSampler::epoch_length() const {
  return options_.remainder == Remainder::kDrop ? batches_per_epoch() * options_.global_batch : n_;
}

int64_t IndexSampler::example_at(int64_t epoch, int64_t position) const {
  if (!options_.shuffle) return position;
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  const uint64_t key = mix64(options_.seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5851f42d4c957f2dull));
  uint64_t x = static_cast<uint64_t>(position);
  do {  // cycle walking: a permutation of [0, 4^k) restricted to [0, n)
    uint64_t l = x >> half_bits_, r = x & mask;
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t f = mix64(r ^ mix64(key + static_cast<uint64_t>(round))) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half_bits_) | r;
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

std::vector<int64_t> IndexSampler::batch(int64_t epoch, int64_t position) const {
  std::vector<int64_t> out(static_cast<size_t>(options_.global_batch), -1);
  for (int64_t k = 0; k < options_.global_batch && position + k < n_; ++k) {
    out[static_cast<size_t>(k)] = example_at(epoch, position + k);
  }
  return out;
}

IndexSampler::Cursor IndexSampler::advance(Cursor from, int64_t k) const {
  const int64_t b = options_.global_batch;
  const int64_t len = epoch_length();
  // Batches left in the first epoch: those that start before its end (drop: that also fit in it).
  auto left_from = [&](int64_t pos) {
    if (pos >= len) return int64_t{0};
    return options_.remainder == Remainder::kDrop ? (len - pos) / b : (len - pos + b - 1) / b;
  };
  const int64_t first = left_from(from.position);
  if (k < first) return {from.epoch, from.position + k * b};
  k -= first;
  const int64_t per = batches_per_epoch();
  return {from.epoch + 1 + k / per, (k % per) * b};
}

}  // namespace mcx::data
