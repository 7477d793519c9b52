// Sharding: how a global array's elements are laid out over devices (jax.sharding).
//
// Two kinds, one value type:
//  - NamedSharding(mesh, spec): the spec says which mesh axes split each dimension (partition_spec.h);
//  - SingleDeviceSharding(device): the whole value on one device (a 1-device mesh with P()).
// The contract is index domains: for a global shape, which box of indices each device holds.
//
// Thread-safety: immutable; cheap to copy.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/mesh.h"
#include "mcx/spmd/partition_spec.h"

namespace mcx {

class Sharding {
 public:
  // Default: SingleDeviceSharding(default_device()).
  Sharding();

  bool is_single_device() const { return single_device_; }
  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  int num_devices() const { return static_cast<int>(mesh_.size()); }
  const std::vector<Device>& device_set() const { return mesh_.devices(); }  // mesh order

  // Index domains for a value of `dims`. Throws InvalidArgument (validate's error, naming the query) when the
  // spec does not fit a value of dims: a dimension the spec splits into a number of shards that does not
  // divide it, a rank below the spec's, or axes the mesh lacks (jax.sharding's queries raise the same).
  std::vector<std::pair<Device, IndexBox>> devices_indices_map(std::span<const int64_t> dims) const;
  std::vector<std::pair<Device, IndexBox>> addressable_devices_indices_map(std::span<const int64_t> dims) const;
  std::vector<int64_t> shard_shape(std::span<const int64_t> dims) const;
  bool is_fully_replicated() const;
  bool is_fully_addressable() const;
  // InvalidArgument (prefixed "[api] ") when the spec does not fit a value of dims (validate_spec).
  absl::Status validate(std::span<const int64_t> dims, std::string_view api) const;
  // Same devices and, for every value of dims, the same index boxes (so P("x") on a size-1 axis equals P()).
  bool equivalent(const Sharding& other, std::span<const int64_t> dims) const;

  // "NamedSharding(mesh={data: 4}, spec=P('data', None))" / "SingleDeviceSharding(cpu:2)".
  std::string to_string() const;
  friend bool operator==(const Sharding& a, const Sharding& b);

 private:
  friend Sharding NamedSharding(Mesh mesh, PartitionSpec spec);
  friend Sharding SingleDeviceSharding(const Device& device);
  Sharding(Mesh mesh, PartitionSpec spec, bool single_device);
  Mesh mesh_;
  PartitionSpec spec_;
  bool single_device_ = true;
};

// InvalidArgument (thrown) when the spec names axes the mesh lacks, uses an axis twice or has
// Unconstrained entries (those are only valid in with_sharding_constraint / jit out_shardings).
Sharding NamedSharding(Mesh mesh, PartitionSpec spec);
Sharding SingleDeviceSharding(const Device& device);

}  // namespace mcx
