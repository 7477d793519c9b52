#include "mcx/checkpoint/save_plan.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/runtime/array_value.h"

namespace mcx::checkpoint {

absl::StatusOr<std::vector<PlannedLeaf>> plan_save(const TreeDef& def, const std::vector<Array>& leaves) {
  const std::vector<std::string> paths = leaf_paths(def);
  if (paths.size() != leaves.size()) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] the tree has ", paths.size(), " leaves, found ",
                                                   leaves.size(), " arrays"));
  }
  std::vector<PlannedLeaf> plan;
  plan.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    const std::string who = absl::StrCat("[checkpoint] leaf '", paths[i], "'");
    if (!a.valid()) return absl::InvalidArgumentError(who + " is an empty Array handle");
    if (a.is_tracer()) return absl::InvalidArgumentError(who + " is a tracer; save concrete arrays outside jit");
    if (a.dtype() == DType::kBFloat16) {
      return absl::InvalidArgumentError(who + " is bfloat16, which has no .npy dtype; convert it to float32 first");
    }
    PlannedLeaf l;
    l.path = paths[i];
    l.dtype = a.dtype();
    l.dims = a.dims();
    for (const auto& [device, box] : a.sharding().devices_indices_map(l.dims)) {
      bool found = false;
      for (PlannedShard& s : l.shards) {
        if (s.box == box) {
          if (device.global_id < s.owner.global_id) s.owner = device;
          found = true;
          break;
        }
      }
      if (!found) l.shards.push_back({box, device});
    }
    plan.push_back(std::move(l));
  }
  return plan;
}

absl::StatusOr<Buffer> OwnedShard::host_data(absl::Time deadline) const {
  if (!pending.has_value()) return data;
  absl::StatusOr<Buffer> copied = pending->await(deadline);
  pending.reset();
  return copied;
}

absl::StatusOr<std::vector<OwnedShard>> owned_shards(const std::vector<PlannedLeaf>& plan,
                                                     const std::vector<Array>& leaves, bool copy) {
  const int me = process_index();
  std::vector<OwnedShard> out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ArrayValue& value = leaves[i].value();
    for (size_t j = 0; j < plan[i].shards.size(); ++j) {
      const PlannedShard& s = plan[i].shards[j];
      if (s.owner.process_index != me) continue;
      const Shard* held = nullptr;
      for (const Shard& h : value.shards) {
        if (h.device == s.owner) held = &h;
      }
      if (held == nullptr) {
        return absl::InternalError(absl::StrCat("[checkpoint] leaf '", plan[i].path, "': device ",
                                                s.owner.to_string(), " should hold the box ", s.box.to_string(),
                                                " but this process has no shard on it"));
      }
      // An asynchronous save leaves device memory (a buffer not ready yet, or ready off the host) to the writer.
      const bool on_host = held->data->is_ready() && [&] {
        absl::StatusOr<std::shared_ptr<const DeviceBuffer>> d = held->data->await_device();
        return d.ok() && (*d)->host_buffer() != nullptr;
      }();
      if (copy && !on_host) {
        MCX_ASSIGN_OR_RETURN(ReadLease lease, held->data->lease_read());
        out.push_back({static_cast<int>(i), static_cast<int>(j), Buffer(), std::move(lease)});
        continue;
      }
      MCX_ASSIGN_OR_RETURN(Buffer b, held->buffer());
      out.push_back({static_cast<int>(i), static_cast<int>(j), copy ? b.copy() : b, std::nullopt});
    }
  }
  return out;
}

}  // namespace mcx::checkpoint
