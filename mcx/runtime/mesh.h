// Mesh: an n-d grid of devices with named axes (jax.sharding.Mesh). Devices may belong to several
// processes; the grid is stored row-major, so a device's index in devices() is its mesh position
// (spmd/partition_spec.h) and its partition id in executables built for this mesh.
//
//   mcx::Mesh mesh = mcx::make_mesh({4}, {"data"});             // the first 4 devices
//   mcx::Mesh mesh2 = mcx::make_mesh({2, 2}, {"data", "model"});
//
// Thread-safety: immutable after construction; cheap to copy (shared).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mcx/runtime/device.h"
#include "mcx/spmd/partition_spec.h"

namespace mcx {

class Mesh {
 public:
  // devices.size() must equal the product of axis_sizes; axis names unique and non-empty; no device twice
  // (InvalidArgument, thrown, naming what differs).
  Mesh(std::vector<Device> devices, std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names);

  const std::vector<Device>& devices() const;  // row-major
  const MeshAxes& axes() const;
  const std::vector<std::string>& axis_names() const { return axes().names; }
  const std::vector<int64_t>& axis_sizes() const { return axes().sizes; }
  int64_t size() const { return static_cast<int64_t>(devices().size()); }
  int64_t axis_size(const std::string& name) const;  // InvalidArgument for an unknown axis
  // The device at mesh coordinates / its position; -1 from position_of when not in the mesh.
  const Device& device_at(const std::vector<int64_t>& coords) const;
  int64_t position_of(const Device& device) const;
  // Whether every device belongs to this process.
  bool is_fully_addressable() const;
  std::string to_string() const;  // "Mesh({data: 4}, devices=[cpu:0 cpu:1 cpu:2 cpu:3])"
  friend bool operator==(const Mesh& a, const Mesh& b);

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// A mesh over the first prod(axis_sizes) devices of devices() (all processes' devices, by global id);
// InvalidArgument when there are fewer devices than the mesh needs (naming both counts and
// MCX_CPU_DEVICE_COUNT).
Mesh make_mesh(std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names);
// The same with an explicit device list.
Mesh make_mesh(std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names,
               std::vector<Device> devices);

}  // namespace mcx
