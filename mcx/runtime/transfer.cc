#include "mcx/runtime/transfer.h"

#include <algorithm>
#include <climits>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/core/profiler.h"
#include "mcx/ir/str_util.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/cross_process_transfer.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

using ir::internal::cat;

std::string dims_string(std::span<const int64_t> dims) { return cat("[", absl::StrJoin(dims, ", "), "]"); }

absl::StatusOr<std::vector<int64_t>> concrete_dims(const AbstractValue& aval, std::string_view api) {
  absl::StatusOr<std::vector<int64_t>> dims = to_concrete(aval.shape);
  if (!dims.ok()) {
    return absl::InvalidArgumentError(
        cat("[", api, "] expected an array of concrete shape, found ", aval.to_string()));
  }
  return dims;
}

// Fills `out` on the device's host-to-device queue with the elements of `box` (global indices) copied from
// `host`, which holds `host_box`. The host buffer's storage is shared, so the caller may drop its handle at once.
void enqueue_host_copy(const Device& device, Buffer host, IndexBox host_box, IndexBox box,
                       std::shared_ptr<AsyncBuffer> out, std::string api) {
  host_to_device_stream_for(device).enqueue([host = std::move(host), host_box = std::move(host_box), box = std::move(box),
                              out = std::move(out), api = std::move(api), device]() {
    try {
      // A Buffer only this task holds, already of the shard's box (a callback's fresh data, a loader's batch),
      // becomes the shard as it is; anything the caller may still hold or write is copied.
      set_from_host(*out, host_box == box && host.sole_owner() ? host : extract_box(host, host_box, box), device);
    } catch (const std::exception& e) {
      out->set_error(absl::InternalError(cat("[", api, " on ", device.to_string(), "] copy failed: ", e.what())));
    }
  });
}

// Copies host data (holding host_box of a value of `dims`) into every addressable shard of sharding.
std::vector<Shard> shards_from_host(const Buffer& host, const IndexBox& host_box, const Sharding& sharding,
                                    std::span<const int64_t> dims, std::string_view api) {
  std::vector<Shard> shards;
  for (auto& [device, box] : sharding.addressable_devices_indices_map(dims)) {
    auto out = AsyncBuffer::pending();
    enqueue_host_copy(device, host, host_box, box, out, std::string(api));
    shards.push_back(Shard{device, std::move(box), std::move(out)});
  }
  return shards;
}

// One piece of a target shard: `region` copied out of a source buffer that holds `source_box`.
struct Piece {
  ReadLease source;  // registered when the copy is planned: a later donation of the source waits for it
  IndexBox source_box;
  IndexBox region;
  Device source_device;
};

// Strips a leading "[to_buffer] " so that messages carry the caller's API name.
absl::Status renamed(const absl::Status& s, std::string_view api) {
  const std::string msg(s.message());
  constexpr std::string_view kPrefix = "[to_buffer] ";
  if (msg.compare(0, kPrefix.size(), kPrefix) != 0) return s;
  return with_message(s, cat("[", api, "] ", msg.substr(kPrefix.size())));
}

}  // namespace

absl::StatusOr<ArrayValue> put_host(const Buffer& host, const Sharding& sharding, bool is_explicit,
                                    std::string_view api) {
  const std::vector<int64_t>& dims = host.dims();
  profiler::Scope traced("transfer", "host to device");
  if (traced.recording()) traced.arg("api", api).arg("bytes", static_cast<int64_t>(host.nbytes()));
  MCX_RETURN_IF_ERROR(sharding.validate(dims, api));
  check_transfer(TransferDirection::kHostToDevice, host.abstract_value(), is_explicit, api);
  ArrayValue v;
  v.aval = host.abstract_value();
  v.sharding = sharding;
  v.shards = shards_from_host(host, full_box(dims), sharding, dims, api);
  v.committed = true;
  return v;
}

absl::StatusOr<ArrayValue> reshard(const ArrayValue& value, const Sharding& sharding, bool is_explicit,
                                   bool committed, std::string_view api) {
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, concrete_dims(value.aval, api));
  MCX_RETURN_IF_ERROR(sharding.validate(dims, api));
  ArrayValue out;
  out.aval = value.aval;
  out.sharding = sharding;
  out.committed = committed;
  out.host_data = value.host_data && !is_explicit;

  // The source shard of each distinct box of the source sharding, preferring one on a given device.
  const auto source_map = value.sharding.devices_indices_map(dims);
  auto source_boxes = [&]() {
    std::vector<std::pair<IndexBox, Device>> boxes;  // distinct boxes, with a device that should hold it
    std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
    for (const auto& [d, box] : source_map) {
      if (seen.insert({box.start, box.limit}).second) boxes.emplace_back(box, d);
    }
    return boxes;
  }();
  auto find_shard = [&](const IndexBox& box, const Device& prefer) -> const Shard* {
    const Shard* any = nullptr;
    for (const Shard& s : value.shards) {
      if (!(s.index == box)) continue;
      if (s.device == prefer) return &s;
      if (any == nullptr) any = &s;
    }
    return any;
  };

  if (value.sharding.equivalent(sharding, dims)) {
    // Same device -> box map: share the shards, in the target's device order.
    for (const auto& [device, box] : sharding.addressable_devices_indices_map(dims)) {
      const Shard* s = nullptr;
      for (const Shard& cand : value.shards) {
        if (cand.device == device) s = &cand;
      }
      if (s == nullptr) {
        return absl::FailedPreconditionError(cat("[", api, "] the source array ", value.aval.to_string(), " with ",
                                                 value.sharding.to_string(), " has no shard on addressable device ",
                                                 device.to_string()));
      }
      out.shards.push_back(Shard{device, box, s->data});
    }
    return out;
  }

  // An uncommitted (process-local) value is this process's copy of the whole array, as in JAX: every process
  // fills its own shards from it. A committed one lives where it was placed, so data may have to move.
  if (value.committed && reshard_crosses_processes(value, sharding, dims)) {
    return reshard_across_processes(value, sharding, dims, is_explicit, committed, api);
  }

  // Plan every target shard first (errors before any work is enqueued).
  struct Target {
    Device device;
    IndexBox box;
    std::vector<Piece> pieces;
    std::shared_ptr<AsyncBuffer> shared;  // set when a source shard on this device is exactly the box
  };
  std::vector<Target> targets;
  bool moves_between_devices = false;
  bool crosses_platforms = false;  // a piece moves to another platform's device: through host memory
  for (auto& [device, box] : sharding.addressable_devices_indices_map(dims)) {
    Target t{device, box, {}, nullptr};
    for (const auto& [src_box, holder] : source_boxes) {
      IndexBox region = intersect(src_box, box);
      if (region.num_elements() == 0) continue;
      const Shard* s = find_shard(src_box, device);
      if (s == nullptr) {
        return absl::FailedPreconditionError(cat(
            "[", api, "] cannot reshard ", value.aval.to_string(), " from ", value.sharding.to_string(), " to ",
            sharding.to_string(), ": the source index box ", src_box.to_string(), " (held by ", holder.to_string(),
            ") is not among this process's shards"));
      }
      if (src_box == box && s->device == device) {
        t.shared = s->data;
        t.pieces.clear();
        break;
      }
      if (!(s->device == device)) moves_between_devices = true;
      if (s->device.platform != device.platform) crosses_platforms = true;
      absl::StatusOr<ReadLease> read = s->data->lease_read();
      if (!read.ok()) return absl::Status(read.status().code(), cat("[", api, "] ", read.status().message()));
      t.pieces.push_back(Piece{*std::move(read), src_box, region, s->device});
    }
    targets.push_back(std::move(t));
  }
  if (crosses_platforms) {
    // Between platforms the data goes off one device into host memory and onto the other: the guard sees both.
    check_transfer(TransferDirection::kDeviceToHost, value.aval, is_explicit, api);
    check_transfer(TransferDirection::kHostToDevice, value.aval, is_explicit, api);
  } else if (moves_between_devices) {
    check_transfer(TransferDirection::kDeviceToDevice, value.aval, is_explicit, api);
  }

  for (Target& t : targets) {
    if (t.shared) {
      out.shards.push_back(Shard{t.device, t.box, t.shared});
      continue;
    }
    auto dst = AsyncBuffer::pending();
    const DType dtype = value.aval.dtype;
    stream_for(t.device).enqueue([pieces = std::move(t.pieces), box = t.box, dst, dtype, device = t.device,
                                  api = std::string(api)]() {
      try {
        Buffer result = Buffer::uninitialized(dtype, box.shape());
        for (const Piece& p : pieces) {
          absl::StatusOr<Buffer> src = p.source.await(default_device_deadline());
          if (!src.ok()) {
            dst->set_error(src.status());
            return;
          }
          copy_box(*src, p.source_box, result, box, p.region);
        }
        set_from_host(*dst, std::move(result), device);
      } catch (const std::exception& e) {
        dst->set_error(absl::InternalError(cat("[", api, " on ", device.to_string(), "] copy failed: ", e.what())));
      }
    });
    out.shards.push_back(Shard{t.device, t.box, std::move(dst)});
  }
  return out;
}

absl::StatusOr<Buffer> fetch_to_host(const ArrayValue& value, bool is_explicit, std::string_view api) {
  check_transfer(TransferDirection::kDeviceToHost, value.aval, is_explicit, api);
  profiler::Scope traced("transfer", "device to host");  // waits for the value, then copies it
  absl::StatusOr<Buffer> b = value.to_buffer();
  if (!b.ok()) return renamed(b.status(), api);
  if (traced.recording()) traced.arg("api", api).arg("bytes", static_cast<int64_t>(b->nbytes()));
  return b;
}

absl::StatusOr<ArrayValue> from_callback(const AbstractValue& aval, const Sharding& sharding,
                                         const std::function<Buffer(const IndexBox&)>& data_callback) {
  constexpr std::string_view api = "make_array_from_callback";
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, concrete_dims(aval, api));
  MCX_RETURN_IF_ERROR(sharding.validate(dims, api));
  check_transfer(TransferDirection::kHostToDevice, aval, /*is_explicit=*/true, api);
  // Every callback runs (and is checked) before any copy is enqueued.
  std::vector<std::pair<Device, IndexBox>> map = sharding.addressable_devices_indices_map(dims);
  std::vector<Buffer> data;
  data.reserve(map.size());
  for (const auto& [device, box] : map) {
    Buffer b;
    try {
      b = data_callback(box);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(cat("[", api, "] the data callback threw for index box ", box.to_string(),
                                            " (device ", device.to_string(), "): ", e.what()));
    }
    if (b.dtype() != aval.dtype || b.dims() != box.shape()) {
      return absl::InvalidArgumentError(cat("[", api, "] the data callback returned ", b.abstract_value().to_string(),
                                            " for index box ", box.to_string(), " (device ", device.to_string(),
                                            "); expected ", dtype_name(aval.dtype), dims_string(box.shape()),
                                            ", the box's shape and the array's dtype"));
    }
    data.push_back(std::move(b));
  }
  ArrayValue v;
  v.aval = aval;
  v.sharding = sharding;
  v.committed = true;
  for (size_t i = 0; i < map.size(); ++i) {
    auto out = AsyncBuffer::pending();
    const IndexBox& box = map[i].second;
    enqueue_host_copy(map[i].first, std::move(data[i]), box, box, out, std::string(api));
    v.shards.push_back(Shard{map[i].first, box, std::move(out)});
  }
  return v;
}

absl::StatusOr<ArrayValue> from_single_device_arrays(const AbstractValue& aval, const Sharding& sharding,
                                                     std::span<const ArrayValue> arrays) {
  constexpr std::string_view api = "make_array_from_single_device_arrays";
  MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, concrete_dims(aval, api));
  MCX_RETURN_IF_ERROR(sharding.validate(dims, api));
  std::vector<std::pair<Device, IndexBox>> map = sharding.addressable_devices_indices_map(dims);
  if (arrays.size() != map.size()) {
    return absl::InvalidArgumentError(cat("[", api, "] expected ", map.size(),
                                          " arrays (one per addressable device of ", sharding.to_string(), " for ",
                                          aval.to_string(), "), found ", arrays.size()));
  }
  const std::vector<int64_t> shard_dims = sharding.shard_shape(dims);
  ArrayValue v;
  v.aval = aval;
  v.sharding = sharding;
  v.committed = true;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const ArrayValue& a = arrays[i];
    const auto& [device, box] = map[i];
    if (a.shards.size() != 1 || a.sharding.num_devices() != 1) {
      return absl::InvalidArgumentError(cat("[", api, "] array ", i, " has ", a.shards.size(), " shards over ",
                                            a.sharding.num_devices(), " devices (", a.sharding.to_string(),
                                            "); expected a single-device array"));
    }
    const Shard& s = a.shards[0];
    if (!(s.device == device)) {
      return absl::InvalidArgumentError(cat("[", api, "] array ", i, " is on ", s.device.to_string(),
                                            "; expected it on ", device.to_string(), ", the sharding's addressable device ",
                                            i, " (", sharding.to_string(), ")"));
    }
    if (a.aval.dtype != aval.dtype) {
      return absl::InvalidArgumentError(cat("[", api, "] array ", i, " (on ", device.to_string(), ") is ",
                                            a.aval.to_string(), "; expected dtype ", dtype_name(aval.dtype)));
    }
    absl::StatusOr<std::vector<int64_t>> adims = to_concrete(a.aval.shape);
    if (!adims.ok() || *adims != shard_dims) {
      return absl::InvalidArgumentError(cat("[", api, "] array ", i, " (on ", device.to_string(), ") is ",
                                            a.aval.to_string(), "; expected the shard shape ", dims_string(shard_dims),
                                            " of ", aval.to_string(), " with ", sharding.to_string()));
    }
    v.shards.push_back(Shard{device, box, s.data});
  }
  return v;
}

absl::StatusOr<std::vector<ProcessShardRange>> process_shard_ranges(const Sharding& sharding, int rank,
                                                                   std::string_view api) {
  {
    // Spec entries beyond the rank are an error whatever the sizes; check with unit-size shards first.
    std::vector<int64_t> probe(rank);
    for (int d = 0; d < rank; ++d) probe[d] = num_shards(sharding.spec(), sharding.mesh().axes(), d);
    MCX_RETURN_IF_ERROR(sharding.validate(probe, api));
  }
  // Probing with one element per shard makes boxes shard indices.
  const MeshAxes& axes = sharding.mesh().axes();
  std::vector<int64_t> probe(rank);
  std::vector<ProcessShardRange> ranges(rank);
  for (int d = 0; d < rank; ++d) {
    probe[d] = ranges[d].shards = num_shards(sharding.spec(), axes, d);
    ranges[d].lo = INT64_MAX;
    ranges[d].hi = INT64_MIN;
  }
  std::vector<std::set<int64_t>> held(rank);
  const auto& devs = sharding.mesh().devices();
  for (size_t p = 0; p < devs.size(); ++p) {
    if (!devs[p].is_addressable()) continue;
    IndexBox b = index_box(sharding.spec(), axes, probe, static_cast<int64_t>(p));
    for (int d = 0; d < rank; ++d) {
      held[d].insert(b.start[d]);
      ranges[d].lo = std::min(ranges[d].lo, b.start[d]);
      ranges[d].hi = std::max(ranges[d].hi, b.limit[d]);
    }
  }
  for (int d = 0; d < rank; ++d) {
    if (ranges[d].lo > ranges[d].hi) {  // no addressable device: the whole dimension, as a process holding all
      ranges[d].lo = 0;
      ranges[d].hi = ranges[d].shards;
      ranges[d].contiguous = true;
      continue;
    }
    ranges[d].contiguous = static_cast<int64_t>(held[d].size()) == ranges[d].hi - ranges[d].lo;
  }
  return ranges;
}

absl::StatusOr<ArrayValue> from_process_local_data(const Sharding& sharding, const Buffer& local_data,
                                                   std::span<const int64_t> global_dims) {
  constexpr std::string_view api = "make_array_from_process_local_data";
  const std::vector<int64_t>& local = local_data.dims();
  const int rank = local_data.rank();
  if (!global_dims.empty() && static_cast<int>(global_dims.size()) != rank) {
    return absl::InvalidArgumentError(cat("[", api, "] the local data ", local_data.abstract_value().to_string(),
                                          " has rank ", rank, " but the global shape ", dims_string(global_dims),
                                          " has rank ", global_dims.size()));
  }
  MCX_ASSIGN_OR_RETURN(std::vector<ProcessShardRange> ranges, process_shard_ranges(sharding, rank, api));
  std::vector<int64_t> global(rank);
  const bool whole_given = !global_dims.empty() && std::equal(local.begin(), local.end(), global_dims.begin());
  for (int d = 0; d < rank; ++d) {
    ProcessShardRange& r = ranges[d];
    if (whole_given) {  // the local data is the whole array
      r.lo = 0;
      r.hi = r.shards;
    } else if (!r.contiguous) {
      return absl::InvalidArgumentError(cat("[", api, "] this process's devices hold non-contiguous shards of dimension ",
                                            d, " under ", sharding.to_string(),
                                            "; expected a contiguous slice per process"));
    }
    const int64_t k = r.shards, count = r.hi - r.lo;
    if (!global_dims.empty()) {
      global[d] = global_dims[d];
      if (global[d] % k != 0 || local[d] != global[d] / k * count) {
        return absl::InvalidArgumentError(cat(
            "[", api, "] dimension ", d, " of the local data ", local_data.abstract_value().to_string(), " has size ",
            local[d], "; expected ", global[d] % k == 0 ? cat(global[d] / k * count) : std::string("a whole shard"),
            count == k ? " (the dimension is not sharded across processes, so each process holds it whole)"
                       : " (this process's slice of the dimension)",
            " for the global shape ", dims_string(global_dims), " with ", sharding.to_string()));
      }
    } else {
      if (local[d] % count != 0) {
        return absl::InvalidArgumentError(cat("[", api, "] dimension ", d, " of the local data has size ", local[d],
                                              ", which does not divide into the ", count, " shards this process holds"));
      }
      global[d] = local[d] / count * k;
    }
  }
  MCX_RETURN_IF_ERROR(sharding.validate(global, api));
  AbstractValue aval{local_data.dtype(), concrete_shape(global)};
  check_transfer(TransferDirection::kHostToDevice, aval, /*is_explicit=*/true, api);
  IndexBox local_box;
  local_box.start.resize(rank);
  local_box.limit.resize(rank);
  for (int d = 0; d < rank; ++d) {
    local_box.start[d] = ranges[d].lo * (global[d] / ranges[d].shards);
    local_box.limit[d] = ranges[d].hi * (global[d] / ranges[d].shards);
  }
  ArrayValue v;
  v.aval = aval;
  v.sharding = sharding;
  v.committed = true;
  v.shards = shards_from_host(local_data, local_box, sharding, global, api);
  return v;
}

}  // namespace mcx
