// Reading a committed step: the manifest (checked against the commit marker's SHA-256), and the arrays of a
// target (any sharding), each process reading only the stored bytes its addressable shards need
// (shard_io.h); the reads of all leaves run on `threads` threads (parallel.h). Errors as in checkpoint_manager.h, naming the file and the leaf path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/checkpoint_manager.h"
#include "mcx/checkpoint/format.h"

namespace mcx::checkpoint {

// NotFound naming the committed steps when `step` is not one; DataLoss for a manifest that does not match its
// commit marker or does not parse.
absl::StatusOr<Manifest> load_manifest(const std::string& root, int64_t step);

absl::StatusOr<std::vector<Array>> restore_arrays(const std::string& root, int64_t step, const TreeDef& def,
                                                  std::span<const LeafTarget> targets, int threads);

}  // namespace mcx::checkpoint
