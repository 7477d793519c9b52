#include "mcx/spmd/partition_spec.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/ir/shard_map.h"
#include "mcx/ir/str_util.h"

namespace mcx {
namespace {

using ir::internal::cat;

std::string quoted(const std::string& name) { return cat("'", name, "'"); }

std::string dims_string(std::span<const int64_t> dims) { return cat("[", absl::StrJoin(dims, ", "), "]"); }

std::string dim_spec_string(const DimSpec& d) {
  if (d.unconstrained) return "P.UNCONSTRAINED";
  if (d.axes.empty()) return "None";
  if (d.axes.size() == 1) return quoted(d.axes[0]);
  std::vector<std::string> q;
  for (const auto& a : d.axes) q.push_back(quoted(a));
  return cat("(", absl::StrJoin(q, ", "), ")");
}

// The sizes of the axes of one dimension, as "('x', 'y') (sizes 2, 2)".
std::string axes_with_sizes(const DimSpec& d, const MeshAxes& mesh) {
  std::vector<std::string> names, sizes;
  for (const auto& a : d.axes) {
    names.push_back(quoted(a));
    int i = mesh.index_of(a);
    sizes.push_back(i < 0 ? "?" : cat(mesh.sizes[i]));
  }
  if (names.size() == 1) return cat("axis ", names[0], " (size ", sizes[0], ")");
  return cat("axes (", absl::StrJoin(names, ", "), ") (sizes ", absl::StrJoin(sizes, ", "), ")");
}

}  // namespace

int64_t MeshAxes::num_devices() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

int MeshAxes::index_of(std::string_view name) const {
  for (int i = 0; i < rank(); ++i) {
    if (names[i] == name) return i;
  }
  return -1;
}

std::string MeshAxes::to_string() const {
  std::vector<std::string> parts;
  for (int i = 0; i < rank(); ++i) {
    parts.push_back(cat(names[i], ": ", i < static_cast<int>(sizes.size()) ? sizes[i] : -1));
  }
  return cat("{", absl::StrJoin(parts, ", "), "}");
}

DimSpec PartitionSpec::dim(int d) const {
  if (d < 0 || d >= size()) return DimSpec{};
  return dims_[d];
}

bool PartitionSpec::has_unconstrained() const {
  return std::any_of(dims_.begin(), dims_.end(), [](const DimSpec& d) { return d.unconstrained; });
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const auto& d : dims_) parts.push_back(dim_spec_string(d));
  // Python tuple spelling: a one-element tuple keeps its trailing comma.
  if (parts.size() == 1) return cat("P(", parts[0], ",)");
  return cat("P(", absl::StrJoin(parts, ", "), ")");
}

std::vector<int64_t> IndexBox::shape() const {
  std::vector<int64_t> s(start.size());
  for (size_t i = 0; i < start.size(); ++i) s[i] = std::max<int64_t>(0, limit[i] - start[i]);
  return s;
}

int64_t IndexBox::num_elements() const {
  int64_t n = 1;
  for (int64_t s : shape()) n *= s;
  return n;
}

bool IndexBox::contains(const IndexBox& other) const {
  if (other.start.size() != start.size()) return false;
  if (other.num_elements() == 0) return true;
  for (size_t i = 0; i < start.size(); ++i) {
    if (other.start[i] < start[i] || other.limit[i] > limit[i]) return false;
  }
  return true;
}

std::string IndexBox::to_string() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < start.size(); ++i) parts.push_back(cat(start[i], ":", limit[i]));
  return cat("[", absl::StrJoin(parts, ", "), "]");
}

IndexBox full_box(std::span<const int64_t> dims) {
  IndexBox b;
  b.start.assign(dims.size(), 0);
  b.limit.assign(dims.begin(), dims.end());
  return b;
}

IndexBox intersect(const IndexBox& a, const IndexBox& b) {
  IndexBox r;
  size_t n = std::min(a.start.size(), b.start.size());
  r.start.resize(n);
  r.limit.resize(n);
  for (size_t i = 0; i < n; ++i) {
    r.start[i] = std::max(a.start[i], b.start[i]);
    r.limit[i] = std::max(r.start[i], std::min(a.limit[i], b.limit[i]));
  }
  return r;
}

absl::Status validate_spec(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims,
                           std::string_view api, bool allow_unconstrained) {
  // A lambda, not a string: validate_spec runs on every placement and call, and its message is rarely needed.
  const auto where = [&] { return cat("partition spec ", spec.to_string(), " on mesh ", mesh.to_string()); };
  if (spec.size() > static_cast<int>(dims.size())) {
    return absl::InvalidArgumentError(cat("[", api, "] ", where(), " has ", spec.size(),
                                                   " entries but the value has rank ", dims.size(),
                                                   " (shape ", dims_string(dims), ")"));
  }
  // The dimension that first named each mesh axis (-1: none yet); inline storage, so a valid spec (the
  // common case, on every placement and call) allocates nothing.
  absl::InlinedVector<int, 8> first_use(mesh.sizes.size(), -1);
  for (int d = 0; d < spec.size(); ++d) {
    const DimSpec& ds = spec.dims()[d];
    if (ds.unconstrained) {
      if (!allow_unconstrained) {
        return absl::InvalidArgumentError(cat(
            "[", api, "] ", where(), ": dimension ", d,
            " is Unconstrained, which is only allowed inside jit (with_sharding_constraint, out_shardings); "
            "expected mesh axis names or None"));
      }
      if (!ds.axes.empty()) {
        return absl::InvalidArgumentError(cat("[", api, "] ", where(), ": dimension ", d,
                                                       " is Unconstrained but also names mesh axes"));
      }
      continue;
    }
    for (const auto& a : ds.axes) {
      const int axis = mesh.index_of(a);
      if (axis < 0) {
        return absl::InvalidArgumentError(cat("[", api, "] ", where(), ": dimension ", d,
                                                       " names mesh axis ", quoted(a),
                                                       ", which the mesh does not have"));
      }
      if (first_use[axis] >= 0) {
        return absl::InvalidArgumentError(cat("[", api, "] ", where(), ": mesh axis ", quoted(a),
                                                       " is used twice (dimensions ", first_use[axis], " and ", d,
                                                       "); each mesh axis may shard at most one dimension once"));
      }
      first_use[axis] = d;
    }
    int64_t k = num_shards(spec, mesh, d);
    if (k > 0 && dims[d] % k != 0) {
      return absl::InvalidArgumentError(cat(
          "[", api, "] ", where(), ": dimension ", d, " of shape ", dims_string(dims), " has size ", dims[d],
          ", which is not divisible by ", k, ", the number of shards over mesh ", axes_with_sizes(ds, mesh),
          " (uneven sharding is not supported)"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> mesh_coords(const MeshAxes& mesh, int64_t position) {
  std::vector<int64_t> coords(mesh.rank());
  for (int i = mesh.rank() - 1; i >= 0; --i) {
    coords[i] = position % mesh.sizes[i];
    position /= mesh.sizes[i];
  }
  return coords;
}

int64_t mesh_position(const MeshAxes& mesh, std::span<const int64_t> coords) {
  int64_t p = 0;
  for (int i = 0; i < mesh.rank(); ++i) p = p * mesh.sizes[i] + coords[i];
  return p;
}

int64_t num_shards(const PartitionSpec& spec, const MeshAxes& mesh, int d) {
  DimSpec ds = spec.dim(d);
  int64_t k = 1;
  for (const auto& a : ds.axes) {
    int i = mesh.index_of(a);
    if (i >= 0) k *= mesh.sizes[i];
  }
  return k;
}

namespace {

// Throws validate_spec's InvalidArgument when spec does not fit a value of dims; when it fits (every internal
// caller has validated already) this costs a few integer operations and builds no string.
void check_fits(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims, std::string_view api) {
  bool fits = spec.size() <= static_cast<int>(dims.size());
  for (int d = 0; fits && d < spec.size(); ++d) {
    int64_t k = 1;
    for (const auto& a : spec.dims()[d].axes) {
      const int i = mesh.index_of(a);
      if (i < 0) {
        fits = false;
        break;
      }
      k *= mesh.sizes[i];
    }
    fits = fits && dims[d] % k == 0;
  }
  if (!fits) throw_if_error(validate_spec(spec, mesh, dims, api, /*allow_unconstrained=*/true));
}

}  // namespace

std::vector<int64_t> shard_shape(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims) {
  check_fits(spec, mesh, dims, "shard_shape");
  std::vector<int64_t> s(dims.begin(), dims.end());
  for (size_t d = 0; d < s.size(); ++d) s[d] /= num_shards(spec, mesh, static_cast<int>(d));
  return s;
}

IndexBox index_box(const PartitionSpec& spec, const MeshAxes& mesh, std::span<const int64_t> dims,
                   int64_t position) {
  check_fits(spec, mesh, dims, "index_box");
  std::vector<int64_t> coords = mesh_coords(mesh, position);
  IndexBox box = full_box(dims);
  for (size_t d = 0; d < dims.size(); ++d) {
    DimSpec ds = spec.dim(static_cast<int>(d));
    int64_t shard = 0, k = 1;
    for (const auto& a : ds.axes) {  // first axis major
      int i = mesh.index_of(a);
      if (i < 0) continue;
      shard = shard * mesh.sizes[i] + coords[i];
      k *= mesh.sizes[i];
    }
    int64_t size = dims[d] / k;
    box.start[d] = shard * size;
    box.limit[d] = box.start[d] + size;
  }
  return box;
}

bool is_fully_replicated(const PartitionSpec& spec, const MeshAxes& mesh) {
  for (const auto& ds : spec.dims()) {
    for (const auto& a : ds.axes) {
      int i = mesh.index_of(a);
      if (i >= 0 && mesh.sizes[i] > 1) return false;
    }
  }
  return true;
}

std::vector<std::vector<int64_t>> axis_groups(const MeshAxes& mesh, std::span<const int> axis_indices) {
  return ir::mesh_axis_groups(mesh.sizes, axis_indices);
}

std::vector<int64_t> encode_spec(const PartitionSpec& spec, const MeshAxes& mesh) {
  std::vector<int64_t> out;
  for (const auto& ds : spec.dims()) {
    if (ds.unconstrained) {
      out.push_back(-1);
      continue;
    }
    out.push_back(static_cast<int64_t>(ds.axes.size()));
    for (const auto& a : ds.axes) out.push_back(mesh.index_of(a));
  }
  return out;
}

absl::StatusOr<PartitionSpec> decode_spec(std::span<const int64_t> encoded, const MeshAxes& mesh) {
  std::vector<DimSpec> dims;
  std::vector<bool> used(mesh.rank(), false);
  size_t i = 0;
  while (i < encoded.size()) {
    int64_t n = encoded[i++];
    if (n == -1) {
      dims.push_back(DimSpec{{}, true});
      continue;
    }
    if (n < -1 || n > mesh.rank() || i + static_cast<size_t>(n) > encoded.size()) {
      return absl::InvalidArgumentError(cat(
          "[decode_spec] encoded sharding [", absl::StrJoin(encoded, ", "), "]: entry ", dims.size(),
          " has axis count ", n, ", expected -1 (Unconstrained) or 0..", mesh.rank(), " with that many axis "
          "indices following (", encoded.size() - i, " values left)"));
    }
    DimSpec ds;
    for (int64_t k = 0; k < n; ++k) {
      int64_t a = encoded[i++];
      if (a < 0 || a >= mesh.rank()) {
        return absl::InvalidArgumentError(cat("[decode_spec] encoded sharding [",
                                                       absl::StrJoin(encoded, ", "), "]: axis index ", a,
                                                       " is not an axis of mesh ", mesh.to_string()));
      }
      if (used[a]) {
        return absl::InvalidArgumentError(cat("[decode_spec] encoded sharding [",
                                                       absl::StrJoin(encoded, ", "), "]: mesh axis ",
                                                       quoted(mesh.names[a]), " is used twice"));
      }
      used[a] = true;
      ds.axes.push_back(mesh.names[a]);
    }
    dims.push_back(std::move(ds));
  }
  return PartitionSpec(std::move(dims));
}

}  // namespace mcx
