#include "mcx/runtime/sharding.h"

#include <map>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx {
namespace {

using ir::internal::cat;

// The spec without trailing replicated entries (P('x', None) and P('x') mean the same).
std::vector<DimSpec> normalized(const PartitionSpec& spec) {
  std::vector<DimSpec> d = spec.dims();
  while (!d.empty() && d.back().axes.empty() && !d.back().unconstrained) d.pop_back();
  return d;
}

const Sharding& default_sharding() {
  static const Sharding* s = new Sharding(SingleDeviceSharding(default_device()));  // never destroyed
  return *s;
}

}  // namespace

Sharding::Sharding() : Sharding(default_sharding()) {}

Sharding::Sharding(Mesh mesh, PartitionSpec spec, bool single_device)
    : mesh_(std::move(mesh)), spec_(std::move(spec)), single_device_(single_device) {}

std::vector<std::pair<Device, IndexBox>> Sharding::devices_indices_map(std::span<const int64_t> dims) const {
  throw_if_error(validate(dims, "Sharding::devices_indices_map"));
  std::vector<std::pair<Device, IndexBox>> out;
  const auto& devs = mesh_.devices();
  out.reserve(devs.size());
  for (size_t p = 0; p < devs.size(); ++p) {
    out.emplace_back(devs[p], index_box(spec_, mesh_.axes(), dims, static_cast<int64_t>(p)));
  }
  return out;
}

std::vector<std::pair<Device, IndexBox>> Sharding::addressable_devices_indices_map(
    std::span<const int64_t> dims) const {
  throw_if_error(validate(dims, "Sharding::addressable_devices_indices_map"));
  std::vector<std::pair<Device, IndexBox>> out;
  const auto& devs = mesh_.devices();
  for (size_t p = 0; p < devs.size(); ++p) {
    if (!devs[p].is_addressable()) continue;
    out.emplace_back(devs[p], index_box(spec_, mesh_.axes(), dims, static_cast<int64_t>(p)));
  }
  return out;
}

std::vector<int64_t> Sharding::shard_shape(std::span<const int64_t> dims) const {
  throw_if_error(validate(dims, "Sharding::shard_shape"));
  return mcx::shard_shape(spec_, mesh_.axes(), dims);
}

bool Sharding::is_fully_replicated() const { return mcx::is_fully_replicated(spec_, mesh_.axes()); }

bool Sharding::is_fully_addressable() const { return mesh_.is_fully_addressable(); }

absl::Status Sharding::validate(std::span<const int64_t> dims, std::string_view api) const {
  return validate_spec(spec_, mesh_.axes(), dims, api);
}

bool Sharding::equivalent(const Sharding& other, std::span<const int64_t> dims) const {
  if (*this == other) return true;
  if (num_devices() != other.num_devices()) return false;
  if (!validate(dims, "equivalent").ok() || !other.validate(dims, "equivalent").ok()) return false;
  std::map<int, std::pair<Device, IndexBox>> mine;
  for (auto& [d, box] : devices_indices_map(dims)) mine.emplace(d.global_id, std::make_pair(d, box));
  for (const auto& [d, box] : other.devices_indices_map(dims)) {
    auto it = mine.find(d.global_id);
    if (it == mine.end() || !(it->second.first == d) || !(it->second.second == box)) return false;
  }
  return true;
}

std::string Sharding::to_string() const {
  if (single_device_) return cat("SingleDeviceSharding(", mesh_.devices()[0].to_string(), ")");
  return cat("NamedSharding(mesh=", mesh_.axes().to_string(), ", spec=", spec_.to_string(), ")");
}

bool operator==(const Sharding& a, const Sharding& b) {
  return a.single_device_ == b.single_device_ && a.mesh_ == b.mesh_ && normalized(a.spec_) == normalized(b.spec_);
}

Sharding NamedSharding(Mesh mesh, PartitionSpec spec) {
  // Every product of distinct axis sizes divides the device count, so dimensions of that size check
  // everything validate_spec checks except divisibility, which depends on the value.
  std::vector<int64_t> dims(spec.size(), mesh.size());
  throw_if_error(validate_spec(spec, mesh.axes(), dims, "NamedSharding"));
  return Sharding(std::move(mesh), std::move(spec), /*single_device=*/false);
}

Sharding SingleDeviceSharding(const Device& device) {
  return Sharding(Mesh({device}, {}, {}), PartitionSpec(), /*single_device=*/true);
}

}  // namespace mcx
