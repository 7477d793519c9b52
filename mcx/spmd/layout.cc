#include "mcx/spmd/layout.h"

#include "mcx/ir/str_util.h"

namespace mcx::spmd::internal {

int64_t axes_size(std::span<const int> axes, const MeshAxes& mesh) {
  int64_t n = 1;
  for (int a : axes) n *= mesh.sizes[a];
  return n;
}

int64_t shards(const Layout& layout, const MeshAxes& mesh, int d) { return axes_size(layout[d], mesh); }

std::vector<int64_t> local_dims(const Layout& layout, const MeshAxes& mesh, std::span<const int64_t> dims) {
  std::vector<int64_t> out(dims.begin(), dims.end());
  for (size_t d = 0; d < out.size() && d < layout.size(); ++d) out[d] /= shards(layout, mesh, static_cast<int>(d));
  return out;
}

int sharded_dims(const Layout& layout, const MeshAxes& mesh) {
  int n = 0;
  for (size_t d = 0; d < layout.size(); ++d) n += shards(layout, mesh, static_cast<int>(d)) > 1 ? 1 : 0;
  return n;
}

int64_t total_shards(const Layout& layout, const MeshAxes& mesh) {
  int64_t n = 1;
  for (size_t d = 0; d < layout.size(); ++d) n *= shards(layout, mesh, static_cast<int>(d));
  return n;
}

std::vector<bool> used_axes(const Layout& layout, const MeshAxes& mesh) {
  std::vector<bool> used(mesh.rank(), false);
  for (const AxisList& axes : layout)
    for (int a : axes) used[a] = true;
  return used;
}

bool is_valid(const Layout& layout, const MeshAxes& mesh, std::span<const int64_t> dims) {
  if (layout.size() != dims.size()) return false;
  std::vector<bool> used(mesh.rank(), false);
  for (size_t d = 0; d < layout.size(); ++d) {
    for (int a : layout[d]) {
      if (a < 0 || a >= mesh.rank() || used[a]) return false;
      used[a] = true;
    }
    int64_t k = shards(layout, mesh, static_cast<int>(d));
    if (dims[d] % k != 0) return false;
  }
  return true;
}

Layout layout_from_spec(const PartitionSpec& spec, const MeshAxes& mesh, int rank,
                        std::vector<bool>* unconstrained) {
  Layout out = replicated(rank);
  if (unconstrained) unconstrained->assign(static_cast<size_t>(rank), false);
  for (int d = 0; d < rank; ++d) {
    DimSpec ds = spec.dim(d);
    if (ds.unconstrained) {
      if (unconstrained) (*unconstrained)[d] = true;
      continue;
    }
    for (const std::string& name : ds.axes) {
      int a = mesh.index_of(name);
      if (a >= 0 && mesh.sizes[a] > 1) out[d].push_back(a);
    }
  }
  return out;
}

PartitionSpec spec_from_layout(const Layout& layout, const MeshAxes& mesh) {
  std::vector<DimSpec> dims;
  for (const AxisList& axes : layout) {
    DimSpec ds;
    for (int a : axes) ds.axes.push_back(mesh.names[a]);
    dims.push_back(std::move(ds));
  }
  while (!dims.empty() && dims.back().axes.empty()) dims.pop_back();
  return PartitionSpec(std::move(dims));
}

std::string layout_to_string(const Layout& layout, const MeshAxes& mesh) {
  std::string s = "[";
  for (size_t d = 0; d < layout.size(); ++d) {
    if (d) s += ", ";
    s += "{";
    for (size_t i = 0; i < layout[d].size(); ++i) {
      if (i) s += ",";
      s += mesh.names[layout[d][i]];
    }
    s += "}";
  }
  return s + "]";
}

Layout fill_unconstrained(const Layout& want, const std::vector<bool>& unconstrained, const Layout& current,
                          const MeshAxes& mesh, std::span<const int64_t> dims) {
  Layout out = want;
  std::vector<bool> used = used_axes(want, mesh);
  for (size_t d = 0; d < out.size(); ++d) {
    if (d >= unconstrained.size() || !unconstrained[d] || d >= current.size()) continue;
    bool ok = dims[d] % axes_size(current[d], mesh) == 0;
    for (int a : current[d]) ok = ok && !used[a];
    if (!ok) continue;
    out[d] = current[d];
    for (int a : current[d]) used[a] = true;
  }
  return out;
}

}  // namespace mcx::spmd::internal
