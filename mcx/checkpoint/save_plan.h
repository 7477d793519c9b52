// Which files a save writes and who writes them, computed alike on every process from the leaves' shardings
// (no communication): per leaf, one file per distinct index box of devices_indices_map, written by the
// device with the lowest global id holding that box (so a replicated box is written once, by its lowest
// device). Also the host copies of the shards this process owns.
//
// Errors: InvalidArgument "[checkpoint] leaf '<path>' ..." for an empty handle, a tracer, or bfloat16 (no
// .npy dtype); a device error while awaiting a shard. Thread-safety: pure, except awaiting device data.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/format.h"
#include "mcx/core/buffer.h"
#include "mcx/runtime/device.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"

namespace mcx::checkpoint {

struct PlannedShard {
  IndexBox box;
  Device owner;
};

struct PlannedLeaf {
  std::string path;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<PlannedShard> shards;  // shard j is file shard_file_name(leaf, j)
};

// A shard this process writes, already on the host.
struct OwnedShard {
  int leaf = 0;
  int shard = 0;
  Buffer data;
};

absl::StatusOr<std::vector<PlannedLeaf>> plan_save(const TreeDef& def, const std::vector<Array>& leaves);

// The host buffers of the shards this process owns. copy: true makes private copies (so the arrays may be
// donated or freed while a background write runs); false shares the arrays' (immutable) host storage.
absl::StatusOr<std::vector<OwnedShard>> owned_shards(const std::vector<PlannedLeaf>& plan,
                                                     const std::vector<Array>& leaves, bool copy);

}  // namespace mcx::checkpoint
