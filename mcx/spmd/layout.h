// Internal to the partitioner: a value's sharding as mesh-axis indices per dimension.
//
// A Layout has one entry per dimension of the value, each listing the mesh axes (indices into
// MeshAxes, major first) that dimension is split over. Axes of size 1 never appear: they split nothing,
// so dropping them keeps two layouts that place the same data equal and spares no-op collectives.
// A valid Layout uses each axis at most once and divides every dimension evenly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/spmd/partition_spec.h"

namespace mcx::spmd::internal {

using AxisList = std::vector<int>;
using Layout = std::vector<AxisList>;

// Replicated layout of the given rank.
inline Layout replicated(int rank) { return Layout(static_cast<size_t>(rank)); }

// Number of pieces dimension d is split into.
int64_t shards(const Layout& layout, const MeshAxes& mesh, int d);
// Product of the sizes of the listed axes.
int64_t axes_size(std::span<const int> axes, const MeshAxes& mesh);
// Local (per-device) dims of a value with global dims under layout.
std::vector<int64_t> local_dims(const Layout& layout, const MeshAxes& mesh, std::span<const int64_t> dims);
// Number of dimensions split into more than one piece.
int sharded_dims(const Layout& layout, const MeshAxes& mesh);
// Total number of pieces (product over dimensions).
int64_t total_shards(const Layout& layout, const MeshAxes& mesh);
// Every axis used by layout, as a per-axis flag vector of mesh.rank() entries.
std::vector<bool> used_axes(const Layout& layout, const MeshAxes& mesh);
// True when each axis is used once and every dimension divides.
bool is_valid(const Layout& layout, const MeshAxes& mesh, std::span<const int64_t> dims);

// From a (validated) PartitionSpec: names become indices, size-1 axes are dropped, Unconstrained
// entries become replicated and are flagged in *unconstrained (when not null; one flag per dimension).
Layout layout_from_spec(const PartitionSpec& spec, const MeshAxes& mesh, int rank,
                        std::vector<bool>* unconstrained = nullptr);
// To a PartitionSpec with trailing replicated dimensions omitted (fully replicated: P()).
PartitionSpec spec_from_layout(const Layout& layout, const MeshAxes& mesh);
// "[{x}, {}, {x,y}]" with axis names, for notes and errors.
std::string layout_to_string(const Layout& layout, const MeshAxes& mesh);

// Layout `want` with its flagged (unconstrained) dimensions filled from `current` where that keeps the
// layout valid, replicated otherwise.
Layout fill_unconstrained(const Layout& want, const std::vector<bool>& unconstrained, const Layout& current,
                          const MeshAxes& mesh, std::span<const int64_t> dims);

}  // namespace mcx::spmd::internal
