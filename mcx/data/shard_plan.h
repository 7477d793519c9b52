// Which rows of a global batch this process reads, and who else reads them, from the target sharding's
// index map (Sharding::devices_indices_map): each process reads only the rows its addressable devices hold.
//
// Data parallel (batch split over every device): each process reads its devices' rows. Model parallel within
// a process (feature dims split, batch not): the process reads the rows once and every device gets its box.
// Replicas spanning processes (batch split over an axis, replicated over another that crosses processes):
// the processes holding the same rows read the same examples; `replicas` lists them for MCX_DATA_VERIFY.
// Thread-safety: immutable.
#pragma once

#include <cstdint>
#include <vector>

#include "mcx/runtime/sharding.h"

namespace mcx::data {

struct RowRange {
  int64_t start = 0, limit = 0;
  bool operator==(const RowRange&) const = default;
  bool operator<(const RowRange& o) const { return start != o.start ? start < o.start : limit < o.limit; }
};

struct ShardPlan {
  // Disjoint, sorted row ranges of the global batch this process reads (the union of its devices' rows).
  std::vector<RowRange> local;
  int64_t local_rows = 0;
  // For every distinct row range of this process's devices: the processes whose devices hold exactly it
  // (sorted, including this one).
  std::vector<std::pair<RowRange, std::vector<int>>> replicas;
};

// dims: the global batch's dims (dims[0] = global batch). sharding.validate(dims) must be OK.
ShardPlan make_shard_plan(const Sharding& sharding, const std::vector<int64_t>& dims);

}  // namespace mcx::data
