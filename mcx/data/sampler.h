// The global index sampler: which examples make up each global batch.
//
// The order of epoch e is a permutation of 0..n-1 that depends only on (seed, e, n) (shuffle) or is the
// identity (no shuffle) - never on the number of processes or devices, so jobs of any size see the same
// global batches. The permutation is a keyed Feistel network over the smallest power-of-4 domain >= n with
// cycle walking: computed per position in O(1) memory, no per-epoch table.
// A position is an offset into an epoch's order. Drop-remainder: an epoch has floor(n / B) batches (the last
// n mod B positions are not visited); pad: ceil(n / B) batches, the last one filled up with -1 (padding).
//
// Thread-safety: immutable; all members may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace mcx::data {

enum class Remainder { kDrop, kPad };

struct SamplerOptions {
  int64_t global_batch = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::kDrop;
};

class IndexSampler {
 public:
  // InvalidArgument (thrown) when global_batch < 1, num_examples < 0, or drop-remainder leaves no batch.
  IndexSampler(int64_t num_examples, SamplerOptions options);

  int64_t num_examples() const { return n_; }
  const SamplerOptions& options() const { return options_; }
  int64_t batches_per_epoch() const;
  // The positions an epoch visits (drop: batches * B; pad: n).
  int64_t epoch_length() const;
  // The example at `position` of epoch `epoch`'s order (0 <= position < n).
  int64_t example_at(int64_t epoch, int64_t position) const;
  // The global batch starting at `position`: global_batch example indices, -1 where padded.
  std::vector<int64_t> batch(int64_t epoch, int64_t position) const;

  // Where the k-th batch after (epoch, position) starts (k = 0: there, or the next epoch's start when no
  // batch fits any more). Used to number the batches of a loader from a restored state.
  struct Cursor {
    int64_t epoch = 0;
    int64_t position = 0;
  };
  Cursor advance(Cursor from, int64_t k) const;

 private:
  int64_t n_;
  SamplerOptions options_;
  int half_bits_ = 0;  // the Feistel domain is 2^(2 * half_bits_)
};

}  // namespace mcx::data
