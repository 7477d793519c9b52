#include "mcx/runtime/cross_process_reshard.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/collectives/launch_check.h"
#include "mcx/core/logging.h"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/box_copy.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer_channel.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

// One piece of a target shard: `region` of source box `source_box` (held by `from`) into the shard of `to`.
struct Piece {
  Device from, to;
  IndexBox source_box, region;
  size_t bytes = 0;
};

struct Plan {
  std::vector<int> processes;                        // every process of either sharding, ascending
  std::vector<std::pair<Device, IndexBox>> sources;  // the source's device -> box map
  std::vector<std::pair<Device, IndexBox>> targets;  // the target's device -> box map
  std::vector<Piece> pieces;                         // by target device, then by source box
};

Plan make_plan(const Sharding& source, const Sharding& target, std::span<const int64_t> dims, size_t element_size) {
  Plan plan;
  plan.sources = source.devices_indices_map(dims);
  plan.targets = target.devices_indices_map(dims);
  // The distinct source boxes, each with the devices holding it (in the source's device order).
  std::vector<std::pair<IndexBox, std::vector<Device>>> boxes;
  for (const auto& [device, box] : plan.sources) {
    auto it = std::find_if(boxes.begin(), boxes.end(), [&](const auto& b) { return b.first == box; });
    if (it == boxes.end()) {
      boxes.push_back({box, {device}});
    } else {
      it->second.push_back(device);
    }
  }
  for (const auto& [to, target_box] : plan.targets) {
    for (const auto& [source_box, holders] : boxes) {
      IndexBox region = intersect(source_box, target_box);
      if (region.num_elements() == 0) continue;
      auto local = std::find_if(holders.begin(), holders.end(),
                                [&](const Device& d) { return d.process_index == to.process_index; });
      const Device from = local != holders.end() ? *local : holders.front();
      const size_t bytes = static_cast<size_t>(region.num_elements()) * element_size;
      plan.pieces.push_back(Piece{from, to, source_box, std::move(region), bytes});
    }
  }
  for (const auto& entry : plan.sources) plan.processes.push_back(entry.first.process_index);
  for (const auto& entry : plan.targets) plan.processes.push_back(entry.first.process_index);
  std::sort(plan.processes.begin(), plan.processes.end());
  plan.processes.erase(std::unique(plan.processes.begin(), plan.processes.end()), plan.processes.end());
  return plan;
}

int rank_of(const Plan& plan, int process) {
  return static_cast<int>(std::lower_bound(plan.processes.begin(), plan.processes.end(), process) -
                          plan.processes.begin());
}

// What this process does: the source shards it reads, the target shards it fills.
struct Work {
  struct Target {
    Device device;
    IndexBox box;
    std::shared_ptr<AsyncBuffer> data;
  };
  std::map<int, ReadLease> sources;  // by the source device's global id
  std::vector<Target> targets;       // its target shards, in plan order
};

// Runs this process's side of the plan (on a stream): packs what it sends, exchanges, fills its target shards.
absl::Status run(const Plan& plan, const Work& work, const AbstractValue& aval, TransferChannel& channel,
                 uint64_t sequence, const LaunchTag& tag, std::string_view api) {
  const absl::Time deadline = default_device_deadline();
  const int me = mcx::process_index();
  const size_t element_size = dtype_size(aval.dtype);
  const size_t n = plan.processes.size();
  std::map<int, Buffer> source;  // by device global id
  std::vector<std::vector<std::byte>> in(n);
  // Everything up to the exchange runs in this transfer's turn, so the turn always ends (the next transfer on
  // the channel never waits for one that failed early), and a local failure aborts the group: the peers
  // waiting for this process's pieces fail at once instead of at their deadline.
  absl::Status exchanged = channel.in_turn(sequence, deadline, [&](PeerGroup& g) -> absl::Status {
    for (const auto& [id, lease] : work.sources) {
      absl::StatusOr<Buffer> b = lease.await(deadline);
      if (!b.ok()) {
        g.abort(b.status());
        return b.status();
      }
      source.emplace(id, *std::move(b));
    }
    std::vector<std::vector<std::byte>> out(n);
    std::vector<size_t> in_bytes(n, 0);
    for (const Piece& p : plan.pieces) {
      if (p.from.process_index == me && p.to.process_index != me) {
        std::vector<std::byte>& buffer = out[static_cast<size_t>(rank_of(plan, p.to.process_index))];
        const size_t at = buffer.size();
        buffer.resize(at + p.bytes);
        const Buffer& src = source.at(p.from.global_id);
        copy_box(src.data(), p.source_box.start, src.dims(), buffer.data() + at, p.region.start, p.region.shape(),
                 p.region, element_size);
      } else if (p.to.process_index == me && p.from.process_index != me) {
        in_bytes[static_cast<size_t>(rank_of(plan, p.from.process_index))] += p.bytes;
      }
    }
    std::vector<PeerGroup::Send> sends;
    std::vector<PeerGroup::Recv> recvs;
    const uint64_t base = (sequence % (uint64_t{1} << 40)) * kPeerTagSpan;
    for (size_t r = 0; r < n; ++r) {
      if (!out[r].empty()) sends.push_back({static_cast<int>(r), base, out[r].data(), static_cast<int64_t>(out[r].size())});
      if (in_bytes[r] > 0) {
        in[r].resize(in_bytes[r]);
        recvs.push_back({static_cast<int>(r), base, in[r].data(), static_cast<int64_t>(in_bytes[r])});
      }
    }
    LaunchCheck check(tag, me, std::string(api), g.description(),
                      "every process must issue the same device_puts between these processes in the same order");
    return peer_exchange(g, std::move(sends), std::move(recvs), base, deadline, check.piggyback());
  });
  if (!exchanged.ok()) return exchanged;
  std::vector<size_t> offset(n, 0);
  for (const Work::Target& t : work.targets) {
    const std::vector<int64_t> dims = t.box.shape();
    Buffer result = Buffer::uninitialized(aval.dtype, dims);
    for (const Piece& p : plan.pieces) {
      if (!(p.to == t.device)) continue;
      if (p.from.process_index == me) {
        const Buffer& src = source.at(p.from.global_id);
        copy_box(src.data(), p.source_box.start, src.dims(), result.mutable_data(), t.box.start, dims, p.region,
                 element_size);
      } else {
        const size_t r = static_cast<size_t>(rank_of(plan, p.from.process_index));
        copy_box(in[r].data() + offset[r], p.region.start, p.region.shape(), result.mutable_data(), t.box.start, dims,
                 p.region, element_size);
        offset[r] += p.bytes;
      }
    }
    set_from_host(*t.data, std::move(result), t.device);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArrayValue> reshard_pieces_across_processes(const ArrayValue& value, const Sharding& target,
                                                           std::span<const int64_t> dims, bool is_explicit,
                                                           bool committed, std::string_view api) {
  const Sharding& source = value.sharding;
  const int me = mcx::process_index();
  const Plan plan = make_plan(source, target, dims, dtype_size(value.aval.dtype));
  ArrayValue out;
  out.aval = value.aval;
  out.sharding = target;
  out.committed = committed;
  if (!std::binary_search(plan.processes.begin(), plan.processes.end(), me)) return out;  // nothing here
  check_transfer(TransferDirection::kDeviceToDevice, value.aval, is_explicit, api);

  Work work;
  std::optional<Device> stream_device;  // this process's lowest device of either sharding
  for (const Piece& p : plan.pieces) {
    if (p.from.process_index != me || work.sources.count(p.from.global_id)) continue;
    auto shard = std::find_if(value.shards.begin(), value.shards.end(), [&](const Shard& s) { return s.device == p.from; });
    if (shard == value.shards.end()) {
      return absl::FailedPreconditionError(absl::StrCat("[", std::string(api), "] cannot transfer ", value.aval.to_string(),
                                                        " from ", source.to_string(), " to ", target.to_string(),
                                                        ": this process holds no shard on ", p.from.to_string()));
    }
    absl::StatusOr<ReadLease> read = shard->data->lease_read();
    if (!read.ok()) return absl::Status(read.status().code(), absl::StrCat("[", std::string(api), "] ", read.status().message()));
    work.sources.emplace(p.from.global_id, *std::move(read));
  }
  for (const auto& [device, box] : plan.targets) {
    if (device.process_index != me) continue;
    auto dst = AsyncBuffer::pending();
    work.targets.push_back(Work::Target{device, box, dst});
    out.shards.push_back(Shard{device, box, dst});
  }
  for (const auto* map : {&plan.sources, &plan.targets}) {
    for (const auto& [device, box] : *map) {
      if (device.process_index == me && (!stream_device || device.global_id < stream_device->global_id)) {
        stream_device = device;
      }
    }
  }
  const std::string what = absl::StrCat(std::string(api), " ", value.aval.to_string(), " ", source.to_string(), " -> ",
                                        target.to_string());
  const PlannedTransfer planned = plan_transfer(absl::StrCat("reshard processes ", absl::StrJoin(plan.processes, ",")),
                                                plan.processes);
  const LaunchTag tag{what, fnv1a64(what), planned.sequence};
  stream_for(*stream_device).enqueue([plan, work = std::move(work), aval = value.aval, planned, tag,
                                      api = std::string(api)] {
    absl::Status st;
    try {
      st = run(plan, work, aval, *planned.channel, planned.sequence, tag, api);
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("[", api, "] resharding failed: ", e.what()));
    }
    if (st.ok()) return;
    for (const Work::Target& t : work.targets) t.data->set_error(st);
    if (work.targets.empty()) log_error("[{}] sending the pieces of {} failed: {}", api, tag.program, std::string(st.message()));
  });
  return out;
}

}  // namespace mcx
