// What a partitioned program keeps in the persistent compilation cache (docs/compilation_cache.md), so that
// a later process skips the partitioner as well as the planner and the code generator: the partitioner's
// output layouts and counts, the per-device program's launch fingerprint and the per-device executable
// serialised by its platform (platform/executable.h). Keyed by the platform, the global program and its device
// assignment (spmd_device_assignment: mesh shape, axis names, partition specs; never device ids).
//
// Format (version 1): magic "MCXSPMD1", out specs (count; per spec: count of dims; per dim u64 unconstrained,
// axis names as strings), stats (five counts, notes), u64 fingerprint, str serialised executable.
// decode errors: InvalidArgument naming the offset; those of the platform's Platform::deserialize.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/platform/executable.h"
#include "mcx/platform/platform.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/spmd/partitioner.h"

namespace mcx {

struct SpmdEntry {
  std::vector<PartitionSpec> out_specs;  // the partitioner's result layouts
  spmd::PartitionStats stats;
  uint64_t fingerprint = 0;  // of the per-device program (the launch check across processes)
  std::shared_ptr<const Executable> executable;
};

// "mesh {data: 4}; in P('data', None), P(); out P(), auto": the device assignment component of the key.
std::string spmd_device_assignment(const MeshAxes& axes, const std::vector<PartitionSpec>& in_specs,
                                   const std::vector<std::optional<PartitionSpec>>& out_specs);

absl::StatusOr<std::string> encode_spmd_entry(const SpmdEntry& entry);
// The executable is read back by `platform` (the one the entry's key names).
absl::StatusOr<SpmdEntry> decode_spmd_entry(std::string_view bytes, const Platform& platform);

}  // namespace mcx
