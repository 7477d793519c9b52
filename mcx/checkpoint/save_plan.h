// Which files a save writes and who writes them, computed alike on every process from the leaves' shardings
// (no communication): per leaf, one file per distinct index box of devices_indices_map, written by the
// device with the lowest global id holding that box (so a replicated box is written once, by its lowest
// device). Also the host copies of the shards this process owns.
//
// Errors: InvalidArgument "[checkpoint] leaf '<path>' ..." for an empty handle, a tracer, or bfloat16 (no
// .npy dtype); a device error while awaiting a shard. Thread-safety: pure, except awaiting device data.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/format.h"
#include "mcx/core/buffer.h"
#include "mcx/runtime/async_buffer.h"
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

// A shard this process writes: on the host already, or (an asynchronous save of device memory) a read of its
// device buffer registered at save time, copied to the host by the background writer (host_data), so the step
// is not stalled by the device-to-host copies and a later donation of the array waits for that read.
struct OwnedShard {
  int leaf = 0;
  int shard = 0;
  Buffer data;
  // Set: data is still on the device. Mutable: the writer ends the read once it has the host copy (host_data), so
  // the device memory is not held for the rest of the write.
  mutable std::optional<ReadLease> pending;

  // The values to write: data, or the pending read's host copy (waiting for it until `deadline`; the read ends
  // with it). Called once per save, by its writer.
  absl::StatusOr<Buffer> host_data(absl::Time deadline) const;
};

absl::StatusOr<std::vector<PlannedLeaf>> plan_save(const TreeDef& def, const std::vector<Array>& leaves);

// The shards this process owns. copy (an asynchronous save): host memory is copied privately (so the arrays may
// be donated or freed while the background write runs) and device memory left as a registered read (pending);
// false: the arrays' (immutable) host storage is shared and device memory copied to the host now.
absl::StatusOr<std::vector<OwnedShard>> owned_shards(const std::vector<PlannedLeaf>& plan,
                                                     const std::vector<Array>& leaves, bool copy);

}  // namespace mcx::checkpoint
