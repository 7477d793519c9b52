#include "mcx/runtime/cross_process_transfer.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/hash.h"
#include "mcx/collectives/launch_check.h"
#include "mcx/core/logging.h"
#include "mcx/collectives/peer_collectives.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/cross_process_reshard.h"
#include "mcx/runtime/stream.h"
#include "mcx/runtime/transfer_channel.h"
#include "mcx/runtime/transfer_guard.h"

namespace mcx {
namespace {

// The channel of two devices on different processes: a group over their two processes, used by the source
// device's stream on one side and the target device's stream on the other (one thread each).
PlannedTransfer plan(const Device& from, const Device& to) {
  return plan_transfer(absl::StrCat("transfer ", from.to_string(), "->", to.to_string()),
                       {std::min(from.process_index, to.process_index), std::max(from.process_index, to.process_index)});
}

uint64_t shape_fingerprint(const AbstractValue& aval, const IndexBox& box) {
  return fnv1a64(absl::StrCat(static_cast<int>(aval.dtype), " ", box.to_string()));
}

// One transfer of a shard (the whole box) between two devices on different processes, run on this
// process's side: send (source side) or receive into dst (target side).
absl::Status run_transfer(TransferChannel& ch, uint64_t sequence, bool sending, void* data, int64_t bytes,
                          const LaunchTag& tag) {
  const absl::Time deadline = default_device_deadline();
  MCX_ASSIGN_OR_RETURN(PeerGroup * g, ch.connect(deadline));
  const int peer = 1 - g->rank();
  LaunchCheck check(tag, mcx::process_index(), "device_put", g->description(),
                    "every process must issue the same transfers between these devices in the same order");
  const uint64_t base = (sequence % (uint64_t{1} << 40)) * kPeerTagSpan;
  std::vector<PeerGroup::Send> sends;
  std::vector<PeerGroup::Recv> recvs;
  if (sending) {
    sends.push_back({peer, base, data, bytes});
  } else {
    recvs.push_back({peer, base, data, bytes});
  }
  absl::Status st = peer_exchange(*g, std::move(sends), std::move(recvs), base, deadline, check.piggyback());
  if (!st.ok()) ch.drop();
  return st;
}

}  // namespace

bool reshard_crosses_processes(const ArrayValue& value, const Sharding& target, std::span<const int64_t> dims) {
  if (value.sharding.is_fully_addressable() && target.is_fully_addressable()) return false;
  // Does some target box lack a source on the target device's own process?
  const auto sources = value.sharding.devices_indices_map(dims);
  for (const auto& [device, box] : target.devices_indices_map(dims)) {
    bool local_source = false;
    for (const auto& [src_device, src_box] : sources) {
      if (src_box == box && src_device.process_index == device.process_index) local_source = true;
    }
    if (!local_source) return true;
  }
  return false;
}

absl::StatusOr<ArrayValue> reshard_across_processes(const ArrayValue& value, const Sharding& target,
                                                    std::span<const int64_t> dims, bool is_explicit, bool committed,
                                                    std::string_view api) {
  const Sharding& source = value.sharding;
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("[", std::string(api), "] cannot transfer ", value.aval.to_string(), " from ",
                                                   source.to_string(), " to ", target.to_string(), ": ", why));
  };
  // Other boxes (shard shapes, device counts): cut into pieces and exchanged all-to-all.
  if (source.num_devices() != target.num_devices() || source.shard_shape(dims) != target.shard_shape(dims)) {
    return reshard_pieces_across_processes(value, target, dims, is_explicit, committed, api);
  }
  const auto source_map = source.devices_indices_map(dims);
  const int me = mcx::process_index();
  // Every process plans every transfer in the same order (the target's device order), so the per-channel
  // sequence numbers agree on both sides of each channel.
  struct Move {
    Device from, to;
    IndexBox box;
  };
  std::vector<Move> moves;
  for (const auto& [to, box] : target.devices_indices_map(dims)) {
    std::optional<Device> from;
    for (const auto& [d, b] : source_map) {  // prefer a holder on the target's process
      if (b == box && (!from || (d.process_index == to.process_index && from->process_index != to.process_index))) {
        from = d;
      }
    }
    if (!from) return reshard_pieces_across_processes(value, target, dims, is_explicit, committed, api);
    moves.push_back(Move{*from, to, box});
  }
  check_transfer(TransferDirection::kDeviceToDevice, value.aval, is_explicit, api);

  ArrayValue out;
  out.aval = value.aval;
  out.sharding = target;
  out.committed = committed;
  const DType dtype = value.aval.dtype;
  for (const Move& m : moves) {
    const bool sends = m.from.process_index == me, receives = m.to.process_index == me;
    if (!sends && !receives) continue;
    std::shared_ptr<AsyncBuffer> src;
    if (sends) {
      for (const Shard& s : value.shards) {
        if (s.device == m.from) src = s.data;
      }
      if (!src) return fail(absl::StrCat("this process holds no shard on ", m.from.to_string()));
    }
    if (sends && receives) {  // both devices here: a local copy (or the same buffer)
      if (m.from == m.to) {
        out.shards.push_back(Shard{m.to, m.box, src});
        continue;
      }
      auto dst = AsyncBuffer::pending();
      absl::StatusOr<ReadLease> read = src->lease_read();
      if (!read.ok()) return fail(std::string(read.status().message()));
      stream_for(m.to).enqueue([read = *std::move(read), dst, to = m.to] {
        absl::StatusOr<Buffer> b = read.await(default_device_deadline());
        if (b.ok()) {
          set_from_host(*dst, b->copy(), to);
        } else {
          dst->set_error(b.status());
        }
      });
      out.shards.push_back(Shard{m.to, m.box, dst});
      continue;
    }
    const PlannedTransfer p = plan(m.from, m.to);
    const LaunchTag tag{absl::StrCat(std::string(api), " ", m.box.to_string()), shape_fingerprint(value.aval, m.box), p.sequence};
    if (sends) {
      absl::StatusOr<ReadLease> read = src->lease_read();
      if (!read.ok()) return fail(std::string(read.status().message()));
      stream_for(m.from).enqueue([read = *std::move(read), p, m, tag, api = std::string(api)] {
        absl::StatusOr<Buffer> b = read.await(default_device_deadline());
        absl::Status st = b.status();
        if (st.ok()) {
          st = run_transfer(*p.channel, p.sequence, /*sending=*/true, const_cast<void*>(b->data()),
                            static_cast<int64_t>(b->nbytes()), tag);
        }
        if (!st.ok()) log_error("[{}] sending {} from {} to {} failed: {}", api, m.box.to_string(), m.from.to_string(),
                                m.to.to_string(), std::string(st.message()));
      });
    } else {
      auto dst = AsyncBuffer::pending();
      stream_for(m.to).enqueue([dst, p, m, tag, dtype] {
        Buffer b = Buffer::uninitialized(dtype, m.box.shape());
        absl::Status st = run_transfer(*p.channel, p.sequence, /*sending=*/false, b.mutable_data(),
                                       static_cast<int64_t>(b.nbytes()), tag);
        if (st.ok()) {
          set_from_host(*dst, std::move(b), m.to);
        } else {
          dst->set_error(st);
        }
      });
      out.shards.push_back(Shard{m.to, m.box, dst});
    }
  }
  return out;
}

}  // namespace mcx
