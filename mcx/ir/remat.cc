#include "mcx/ir/remat.h"

#include <map>
#include <utility>

#include "mcx/core/error.h"

namespace mcx::ir {
namespace {

bool is_barrier(const Instr& in, int64_t role) {
  if (in.kind != OpKind::kRematBarrier) return false;
  absl::StatusOr<int64_t> r = in.attrs.get_int("role");
  return r.ok() && *r == role;
}

int64_t region_attr(const Instr& in) { return value_or_throw(in.attrs.get_int("region")); }

std::map<int64_t, int64_t> renumbering(const Program& f, int64_t first_region) {
  std::map<int64_t, int64_t> renamed;
  for (const Instr& in : f.instrs) {
    if (in.kind == OpKind::kRematBarrier) {
      renamed.try_emplace(region_attr(in), first_region + static_cast<int64_t>(renamed.size()));
    }
  }
  return renamed;
}

}  // namespace

Attrs remat_barrier_attrs(int64_t region, int64_t role) { return Attrs{{"region", region}, {"role", role}}; }

int64_t count_remat_regions(const Program& f) { return static_cast<int64_t>(renumbering(f, 0).size()); }

Program renumber_remat_regions(const Program& f, int64_t first_region) {
  const std::map<int64_t, int64_t> renamed = renumbering(f, first_region);
  Program out = f;
  for (Instr& in : out.instrs) {
    if (in.kind == OpKind::kRematBarrier) in.attrs.set("region", renamed.at(region_attr(in)));
  }
  return out;
}

namespace internal {

std::vector<int64_t> remat_region_of_values(const Program& f) {
  const int np = f.num_params();
  std::vector<int64_t> region(f.num_values(), -1);
  // Per region: the region enclosing it (that of its first input's operand) and its nesting depth.
  std::map<int64_t, std::pair<int64_t, int>> parent_depth;
  auto depth = [&](int64_t r) { return r < 0 ? 0 : parent_depth.at(r).second; };
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    const ValueId v = np + static_cast<ValueId>(i);
    if (is_barrier(in, kRematInput)) {
      const int64_t r = region_attr(in);
      const int64_t outer = region[in.operands[0]];
      parent_depth.try_emplace(r, outer, depth(outer) + 1);
      region[v] = r;
      continue;
    }
    if (is_barrier(in, kRematOutput)) {
      auto it = parent_depth.find(region_attr(in));
      region[v] = it == parent_depth.end() ? region[in.operands[0]] : it->second.first;
      continue;
    }
    for (ValueId o : in.operands) {
      if (region[o] >= 0 && (region[v] < 0 || depth(region[o]) > depth(region[v]))) region[v] = region[o];
    }
  }
  return region;
}

Recomputation::Recomputation(ProgramBuilder& b, const Program& f, std::span<const ValueId> forward)
    : b_(b), f_(f), forward_(forward), region_(remat_region_of_values(f)), copy_(f.num_values(), -1) {}

ValueId Recomputation::primal(ValueId v) {
  if (region_[v] < 0) return forward_[v];
  // Depth-first over the members v needs, emitting each copy once its member operands have theirs
  // (iterative: a region may be thousands of instructions long).
  std::vector<ValueId> stack{v};
  while (!stack.empty()) {
    const ValueId u = stack.back();
    if (copy_[u] >= 0) {
      stack.pop_back();
      continue;
    }
    const Instr& in = f_.defining_instr(u);  // members are instructions: parameters are in no region
    bool ready = true;
    for (ValueId o : in.operands) {
      if (region_[o] >= 0 && copy_[o] < 0) {
        stack.push_back(o);
        ready = false;
      }
    }
    if (!ready) continue;
    std::vector<ValueId> ops;
    ops.reserve(in.operands.size());
    for (ValueId o : in.operands) ops.push_back(region_[o] >= 0 ? copy_[o] : forward_[o]);
    Attrs attrs = in.attrs;
    if (is_barrier(in, kRematInput)) attrs.set("role", kRematRecomputedInput);
    copy_[u] = b_.emit_or_throw(in.kind, std::move(ops), std::move(attrs));
    stack.pop_back();
  }
  return copy_[v];
}

}  // namespace internal
}  // namespace mcx::ir
