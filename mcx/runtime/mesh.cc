#include "mcx/runtime/mesh.h"

#include <set>
#include <utility>

#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx {
namespace {

using ir::internal::cat;

[[noreturn]] void throw_invalid(const std::string& message) { throw InvalidArgument(message); }

std::string device_list(const std::vector<Device>& devices) {
  std::vector<std::string> names;
  names.reserve(devices.size());
  for (const Device& d : devices) names.push_back(d.to_string());
  return cat("[", absl::StrJoin(names, " "), "]");
}

}  // namespace

struct Mesh::Impl {
  std::vector<Device> devices;
  MeshAxes axes;
};

Mesh::Mesh(std::vector<Device> devices, std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names) {
  if (axis_sizes.size() != axis_names.size()) {
    throw_invalid(cat("[Mesh] expected one name per axis: ", axis_sizes.size(), " axis sizes [",
                      absl::StrJoin(axis_sizes, ", "), "] but ", axis_names.size(), " names [",
                      absl::StrJoin(axis_names, ", "), "]"));
  }
  std::set<std::string> names;
  int64_t product = 1;
  for (size_t i = 0; i < axis_sizes.size(); ++i) {
    if (axis_names[i].empty()) throw_invalid(cat("[Mesh] axis ", i, " has an empty name; axis names must be non-empty"));
    if (!names.insert(axis_names[i]).second) {
      throw_invalid(cat("[Mesh] axis name '", axis_names[i], "' appears twice in [", absl::StrJoin(axis_names, ", "),
                        "]; axis names must be unique"));
    }
    if (axis_sizes[i] < 1) {
      throw_invalid(cat("[Mesh] axis '", axis_names[i], "' has size ", axis_sizes[i], "; axis sizes must be >= 1"));
    }
    product *= axis_sizes[i];
  }
  if (static_cast<int64_t>(devices.size()) != product) {
    throw_invalid(cat("[Mesh] axis sizes [", absl::StrJoin(axis_sizes, ", "), "] need ", product, " devices but ",
                      devices.size(), " were given: ", device_list(devices)));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) {
        throw_invalid(cat("[Mesh] device ", devices[i].to_string(), " appears twice (mesh positions ", j, " and ", i,
                          ") in ", device_list(devices), "; each device may appear once"));
      }
    }
  }
  auto impl = std::make_shared<Impl>();
  impl->devices = std::move(devices);
  impl->axes = MeshAxes{std::move(axis_names), std::move(axis_sizes)};
  impl_ = std::move(impl);
}

const std::vector<Device>& Mesh::devices() const { return impl_->devices; }
const MeshAxes& Mesh::axes() const { return impl_->axes; }

int64_t Mesh::axis_size(const std::string& name) const {
  int i = axes().index_of(name);
  if (i < 0) throw_invalid(cat("[Mesh::axis_size] the mesh ", axes().to_string(), " has no axis '", name, "'"));
  return axes().sizes[i];
}

const Device& Mesh::device_at(const std::vector<int64_t>& coords) const {
  const MeshAxes& a = axes();
  bool ok = static_cast<int>(coords.size()) == a.rank();
  for (size_t i = 0; ok && i < coords.size(); ++i) ok = coords[i] >= 0 && coords[i] < a.sizes[i];
  if (!ok) {
    throw_invalid(cat("[Mesh::device_at] coordinates [", absl::StrJoin(coords, ", "), "] are not in the mesh ",
                      a.to_string()));
  }
  return devices()[mesh_position(a, coords)];
}

int64_t Mesh::position_of(const Device& device) const {
  const auto& d = devices();
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == device) return static_cast<int64_t>(i);
  }
  return -1;
}

bool Mesh::is_fully_addressable() const {
  for (const Device& d : devices()) {
    if (!d.is_addressable()) return false;
  }
  return true;
}

std::string Mesh::to_string() const { return cat("Mesh(", axes().to_string(), ", devices=", device_list(devices()), ")"); }

bool operator==(const Mesh& a, const Mesh& b) {
  return a.impl_ == b.impl_ || (a.axes() == b.axes() && a.devices() == b.devices());
}

Mesh make_mesh(std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names) {
  int64_t product = 1;
  for (int64_t s : axis_sizes) product *= s;
  const std::vector<Device>& all = devices();
  if (product > static_cast<int64_t>(all.size())) {
    throw_invalid(cat("[make_mesh] axis sizes [", absl::StrJoin(axis_sizes, ", "), "] need ", product,
                      " devices but the job has ", all.size(),
                      " (set MCX_CPU_DEVICE_COUNT or set_cpu_device_count for more virtual CPU devices)"));
  }
  std::vector<Device> chosen;
  if (product > 0) chosen.assign(all.begin(), all.begin() + product);
  return Mesh(std::move(chosen), std::move(axis_sizes), std::move(axis_names));
}

Mesh make_mesh(std::vector<int64_t> axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devices) {
  return Mesh(std::move(devices), std::move(axis_sizes), std::move(axis_names));
}

}  // namespace mcx
