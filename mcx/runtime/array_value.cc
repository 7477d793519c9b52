#include "mcx/runtime/array_value.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_join.h"
#include "mcx/ir/str_util.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/stream.h"

namespace mcx {
namespace {

using ir::internal::cat;

}  // namespace

absl::StatusOr<Buffer> Shard::buffer() const { return data->await(default_device_deadline()); }

ArrayValue ArrayValue::single(Buffer buffer) { return single(std::move(buffer), default_device()); }

ArrayValue ArrayValue::single(Buffer buffer, const Device& device, bool committed) {
  ArrayValue v;
  v.aval = buffer.abstract_value();
  v.sharding = SingleDeviceSharding(device);
  IndexBox box = full_box(buffer.dims());
  // Host data onto the device (no copy for host memory); a failed copy is the shard's error, seen by readers.
  auto data = AsyncBuffer::pending();
  set_from_host(*data, std::move(buffer), device);
  v.shards.push_back(Shard{device, std::move(box), std::move(data)});
  v.committed = committed;
  return v;
}

ArrayValue ArrayValue::single_pending(AbstractValue aval, const Device& device, bool committed) {
  ArrayValue v;
  // A pending value is produced by a computation, so its shape is concrete; a symbolic one gets an empty
  // box of matching rank rather than a wrong one.
  absl::StatusOr<std::vector<int64_t>> dims = to_concrete(aval.shape);
  IndexBox box = dims.ok() ? full_box(*dims) : IndexBox{std::vector<int64_t>(aval.shape.size(), 0),
                                                       std::vector<int64_t>(aval.shape.size(), 0)};
  v.aval = std::move(aval);
  v.sharding = SingleDeviceSharding(device);
  v.shards.push_back(Shard{device, std::move(box), AsyncBuffer::pending()});
  v.committed = committed;
  return v;
}

absl::StatusOr<Buffer> ArrayValue::to_buffer() const {
  if (is_single_shard()) return shards[0].buffer();
  absl::StatusOr<std::vector<int64_t>> dims_or = to_concrete(aval.shape);
  if (!dims_or.ok()) {
    return absl::FailedPreconditionError(
        cat("[to_buffer] the array ", aval.to_string(), " has a symbolic shape; expected a concrete one"));
  }
  const std::vector<int64_t>& dims = *dims_or;
  // Each distinct box of the sharding must be held by some addressable shard.
  std::vector<IndexBox> boxes;
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
  std::vector<std::string> missing;
  std::vector<int> source;  // shard index per box
  for (const auto& [device, box] : sharding.devices_indices_map(dims)) {
    if (!seen.insert({box.start, box.limit}).second) continue;
    int found = -1;
    for (size_t i = 0; i < shards.size() && found < 0; ++i) {
      if (shards[i].index.contains(box)) found = static_cast<int>(i);
    }
    if (found < 0) {
      missing.push_back(cat(box.to_string(), " (held by ", device.to_string(), ", process ", device.process_index, ")"));
      continue;
    }
    boxes.push_back(box);
    source.push_back(found);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        cat("[to_buffer] this process does not hold the whole value of ", aval.to_string(), " with ",
            sharding.to_string(), ": expected every index box among its ", shards.size(),
            " addressable shards, but these are missing: ", absl::StrJoin(missing, ", ")));
  }
  Buffer out = Buffer::uninitialized(aval.dtype, dims);
  const IndexBox whole = full_box(dims);
  for (size_t b = 0; b < boxes.size(); ++b) {
    const Shard& s = shards[source[b]];
    absl::StatusOr<Buffer> data = s.buffer();
    if (!data.ok()) return data.status();
    if (data->dtype() != aval.dtype || data->dims() != s.index.shape()) {
      return absl::InternalError(cat("[to_buffer] the shard on ", s.device.to_string(), " holding ",
                                     s.index.to_string(), " of ", aval.to_string(), " has data ",
                                     data->abstract_value().to_string(), "; expected ", dtype_name(aval.dtype),
                                     " with the box's shape"));
    }
    copy_box(*data, s.index, out, whole, boxes[b]);
  }
  return out;
}

absl::Status ArrayValue::block_until_ready(absl::Time deadline) const {
  absl::Status first;
  for (const Shard& s : shards) {
    absl::StatusOr<std::shared_ptr<const DeviceBuffer>> b = s.data->await_device(deadline);
    if (!b.ok() && first.ok()) first = b.status();
  }
  return first;
}

}  // namespace mcx
