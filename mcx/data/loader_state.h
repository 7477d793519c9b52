// A loader's position as a small serialisable value (for checkpoints: the checkpoint layer's metadata can
// carry to_string()). It counts examples of the global order, not batches or processes, so a state restores
// onto any number of processes or devices: the loader continues with exactly the examples not yet seen
// (with the same global batch size; with another one it continues from the same position of the order).
//
//   "mcx-data-v1 seed=0 epoch=3 position=1536 examples=60000"
//
// Errors: parse_loader_state returns InvalidArgument "[data] loader state: expected ..., found '...'".
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mcx::data {

struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;      // offset into the epoch's order of the next batch's first example
  int64_t num_examples = 0;  // of the data set (restore checks it)
  std::string to_string() const;
  bool operator==(const LoaderState&) const = default;
};

absl::StatusOr<LoaderState> parse_loader_state(const std::string& text);

}  // namespace mcx::data
