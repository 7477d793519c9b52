// PartitionSpec and the index-domain maths of sharded arrays, independent of devices.
//
// A mesh is described here only by its axes (MeshAxes: names and sizes, major to minor); the runtime's
// Mesh (runtime/mesh.h) adds the devices. A device is identified by its *mesh position*: its row-major
// index in the mesh (the same number the IR calls a partition id).
//
// PartitionSpec follows jax.sharding.PartitionSpec: one entry per array dimension, each naming the mesh
// axes that dimension is split over (several axes: the first is major), None (replicated) or
// Unconstrained (inside jit: the partitioner chooses). Trailing dimensions without an entry are
// replicated. Mesh axes not named anywhere replicate the array across them.
//
//   mcx::P("data", mcx::None)          // rows split over "data", columns whole
//   mcx::P(mcx::axes("x", "y"))        // rows split over x*y devices, x major
//   mcx::P()                           // fully replicated
//
// Uneven dimensions are an error, not padding: a dimension of size n split over k devices needs k | n
// (InvalidArgument naming the dimension, its size, the axes and their product).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx {

struct MeshAxes {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;

  int64_t num_devices() const;  // product of sizes (1 for no axes)
  int rank() const { return static_cast<int>(names.size()); }
  int index_of(std::string_view name) const;  // -1 when absent
  std::string to_string() const;              // "{data: 4, model: 2}"
  bool operator==(const MeshAxes&) const = default;
};

// One dimension of a PartitionSpec.
struct DimSpec {
  std::vector<std::string> axes;  // empty: replicated along this dimension
  bool unconstrained = false;     // the partitioner chooses (only meaningful inside jit)
  bool operator==(const DimSpec&) const = default;
};

struct NoneT {};
inline constexpr NoneT None{};
struct UnconstrainedT {};
inline constexpr UnconstrainedT Unconstrained{};

// Several mesh axes on one dimension: mcx::axes("x", "y").
template <typename... Names>
DimSpec axes(Names&&... names) {
  return DimSpec{{std::string(std::forward<Names>(names))...}, false};
}

class PartitionSpec {
 public:
  PartitionSpec() = default;
  explicit PartitionSpec(std::vector<DimSpec> dims) : dims_(std::move(dims)) {}

  const std::vector<DimSpec>& dims() const { return dims_; }
  int size() const { return static_cast<int>(dims_.size()); }
  // The entry for dimension d (replicated beyond size()).
  DimSpec dim(int d) const;
  bool has_unconstrained() const;
  // "P('data', None)", "P(('x', 'y'),)", "P()" -- the Python spelling users know.
  std::string to_string() const;
  bool operator==(const PartitionSpec&) const = default;

 private:
  std::vector<DimSpec> dims_;
};

namespace detail {
inline DimSpec to_dim_spec(const char* name) { return DimSpec{{name}, false}; }
inline DimSpec to_dim_spec(std::string name) { return DimSpec{{std::move(name)}, false}; }
inline DimSpec to_dim_spec(std::string_view name) { return DimSpec{{std::string(name)}, false}; }
inline DimSpec to_dim_spec(NoneT) { return DimSpec{}; }
inline DimSpec to_dim_spec(UnconstrainedT) { return DimSpec{{}, true}; }
inline DimSpec to_dim_spec(DimSpec d) { return d; }
}  // namespace detail

// P(...) builds a PartitionSpec from axis names, None, Unconstrained and axes(...).
template <typename... Entries>
PartitionSpec P(Entries&&... entries) {
  return PartitionSpec(std::vector<DimSpec>{detail::to_dim_spec(std::forward<Entries>(entries))...});
}

// A box of global indices [start, limit) per dimension.
struct IndexBox {
  std::vector<int64_t> start;
  std::vector<int64_t> limit;

  std::vector<int64_t> shape() const;
  int64_t num_elements() const;
  bool contains(const IndexBox& other) const;
  std::string to_string() const;  // "[0:4, 0:8]" (rank 0: "[]")
  bool operator==(const IndexBox&) const = default;
};
IndexBox full_box(std::span<const int64_t> dims);
// The intersection of two boxes of the same rank (empty boxes have start == limit in some dimension).
IndexBox intersect(const IndexBox& a, const IndexBox& b);

// Checks spec against the mesh and a value of the given dims: every axis exists, no axis is used twice,
// spec has at most dims.size() entries, every sharded dimension divides evenly; allow_unconstrained
// false rejects Unconstrained entries. Errors are InvalidArgument starting with "[api] ".
absl::Status validate_spec(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims,
                           std::string_view api, bool allow_unconstrained = false);

// Mesh coordinates (one per axis) of a mesh position, and back.
std::vector<int64_t> mesh_coords(const MeshAxes& mesh, int64_t position);
int64_t mesh_position(const MeshAxes& mesh, std::span<const int64_t> coords);

// Number of devices dimension d is split over (1 when replicated).
int64_t num_shards(const PartitionSpec& spec, const MeshAxes& mesh, int d);
// Shard dims: dims[d] / num_shards(d). Throws InvalidArgument (validate_spec's error) when spec does not fit
// dims (a split that does not divide a dimension, a rank below the spec's, an axis the mesh lacks).
std::vector<int64_t> shard_shape(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims);
// The box the device at `position` holds; throws as shard_shape when spec does not fit dims.
IndexBox index_box(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims,
                   int64_t position);
// True when no mesh axis of size > 1 is named (every device holds the whole value).
bool is_fully_replicated(const PartitionSpec& spec, const MeshAxes& mesh);

// The groups of mesh positions that differ only in the coordinates of `axis_indices`; within a group the
// members are ordered by their linear index over those axes, taken in the given order (first = major).
// Every position appears in exactly one group. Empty axis_indices: every position alone.
std::vector<std::vector<int64_t>> axis_groups(const MeshAxes& mesh, std::span<const int> axis_indices);

// The encoding of a spec as the `sharding` attribute of the IR op sharding_constraint (op.h): per
// dimension a count n and n axis indices, n = -1 for Unconstrained. decode validates against mesh.
std::vector<int64_t> encode_spec(const PartitionSpec& spec, const MeshAxes& mesh);
absl::StatusOr<PartitionSpec> decode_spec(std::span<const int64_t> encoded, const MeshAxes& mesh);

}  // namespace mcx
