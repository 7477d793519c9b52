// The runtime data of a concrete array: its global abstract value, its sharding, and the shards this
// process holds (one per addressable device of the sharding, in the sharding's device order), each an
// AsyncBuffer on a device covering an index box of the global value.
//
// A shard's data may still be being computed (asynchronous dispatch); readers that need the data await
// it. `committed` follows JAX: an array placed explicitly (device_put, jit with shardings, results of
// computations on committed arrays) is committed to its devices; an array made from host data is not and
// may be moved implicitly to where a computation runs.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/buffer.h"
#include "mcx/core/shape.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/sharding.h"

namespace mcx {

struct Shard {
  Device device;
  IndexBox index;                      // the global indices this shard holds
  std::shared_ptr<AsyncBuffer> data;   // never null

  // Blocks until the data is ready (default_device_deadline()) and returns its values in host memory (no copy
  // for host memory; a copy off an accelerator's); the producer's error otherwise.
  absl::StatusOr<Buffer> buffer() const;
};

struct ArrayValue {
  AbstractValue aval;  // global
  Sharding sharding;
  std::vector<Shard> shards;  // addressable shards only
  bool committed = false;
  // Made from host data (Array(Buffer), mcx::array) and never placed explicitly: using it in a
  // computation is an implicit host-to-device transfer for the transfer guard (transfer_guard.h).
  bool host_data = false;

  // One shard with the whole value on `device` (default_device() when omitted), uncommitted: host data put on
  // the device through its platform (no copy for host memory); a failed copy is the shard's error.
  static ArrayValue single(Buffer buffer);
  static ArrayValue single(Buffer buffer, const Device& device, bool committed = false);
  // One pending shard on device, to be completed by a stream task.
  static ArrayValue single_pending(AbstractValue aval, const Device& device, bool committed);

  bool is_single_shard() const { return shards.size() == 1 && sharding.num_devices() == 1; }
  // The whole value as one host buffer: for a single-shard array its buffer (no copy, awaited);
  // otherwise assembled from the shards (FailedPrecondition naming the missing index boxes when this
  // process does not hold the whole value). Awaits readiness; surfaces stream errors.
  absl::StatusOr<Buffer> to_buffer() const;
  // Blocks until every addressable shard is ready; the first stream error otherwise.
  absl::Status block_until_ready(absl::Time deadline) const;
};

}  // namespace mcx
