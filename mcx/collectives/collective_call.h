// What one member of a group passed to a collective, as the in-process communicators (LocalGroup,
// SpanningGroup) record it at their rendezvous: the arguments every member must agree on, and the buffers.
// Internal to the collectives layer's groups. Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "mcx/collectives/communicator.h"
#include "mcx/core/dtype.h"

namespace mcx {

enum class CollectiveKind : uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kPermute, kBarrier };

inline const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kPermute: return "permute";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  int64_t count = 0;  // elements (reductions) or bytes (data movement)
  DType dtype = DType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  int send_to = -1;
  int recv_from = -1;
  const void* in = nullptr;
  bool shared = false;  // all_reduce_shared / all_gather_shared: one result buffer for the group
  void* out = nullptr;  // where the member wants its result (when the group writes it)

  // The arguments that every member must agree on, for messages.
  std::string to_string() const {
    const char* name = collective_kind_name(kind);
    switch (kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduceScatter:
        return absl::StrCat(name, "(count=", count, ", ", std::string(dtype_short_name(dtype)), ", ",
                            std::string(reduce_op_name(op)), ")");
      case CollectiveKind::kAllGather:
      case CollectiveKind::kAllToAll: return absl::StrCat(name, "(bytes=", count, ")");
      case CollectiveKind::kPermute:
        return absl::StrCat(name, "(bytes=", count, ", send_to=", send_to, ", recv_from=", recv_from, ")");
      case CollectiveKind::kBarrier: return "barrier()";
    }
    return "unknown";
  }
  // The arguments that every member of the whole group (on every process) must agree on: to_string without a
  // permutation's own source and destination.
  std::string group_arguments() const {
    if (kind == CollectiveKind::kPermute) return absl::StrCat(collective_kind_name(kind), "(bytes=", count, ")");
    return to_string();
  }
  bool agrees_with(const CollectiveCall& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && op == o.op && shared == o.shared;
  }
};

}  // namespace mcx
