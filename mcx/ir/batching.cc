// vmap as a program transformation (see batching.h): f is replayed with each value marked batched or not;
// instructions without a batched operand are copied, the others go through their batching rule.
#include "mcx/ir/batching.h"

#include <map>

#include "mcx/core/error.h"
#include "mcx/ir/batching_rules.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/control_flow_batching.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {

absl::StatusOr<Program> vmap_program(const Program& f, const std::vector<bool>& batched, const DimExpr& size) {
  using internal::cat;
  if (static_cast<int>(batched.size()) != f.num_params()) {
    return absl::InvalidArgumentError(cat("[vmap_program] expected one batched flag per parameter of '", f.name,
                                          "' (", f.num_params(), "), found ", batched.size()));
  }
  bool any = false;
  for (bool x : batched) any = any || x;
  if (!any) return absl::InvalidArgumentError(cat("[vmap_program] no parameter of '", f.name, "' is batched"));
  if (const std::optional<int64_t> n = size.constant_value(); n && *n < 1) {
    return absl::InvalidArgumentError(cat("[vmap_program] the batch size must be at least 1, found ", *n));
  }
  try {
    ProgramBuilder b(f.name + "_vmap", f.scope);
    std::vector<ValueId> map(f.num_values(), -1);
    std::vector<bool> is_batched(f.num_values(), false);
    for (int p = 0; p < f.num_params(); ++p) {
      AbstractValue t = f.params[p];
      if (batched[p]) t.shape.insert(t.shape.begin(), size);
      map[p] = b.add_parameter(std::move(t));
      is_batched[p] = batched[p];
    }
    const std::vector<int> group_first = sibling_group_firsts(f);
    std::map<int, std::vector<ValueId>> groups;  // first sibling -> every result of the batched group
    for (size_t i = 0; i < f.instrs.size(); ++i) {
      const Instr& in = f.instrs[i];
      const ValueId v = f.num_params() + static_cast<int>(i);
      std::vector<ValueId> ops;
      std::vector<bool> ops_batched;
      bool any_batched = false;
      for (ValueId o : in.operands) {
        ops.push_back(map[o]);
        ops_batched.push_back(is_batched[o]);
        any_batched = any_batched || is_batched[o];
      }
      if (!any_batched) {
        map[v] = b.emit_or_throw(in.kind, std::move(ops), in.attrs);
        continue;
      }
      if (group_first[i] >= 0) {  // a control-flow group, batched as a whole at its first sibling
        const int first = group_first[i];
        if (first == static_cast<int>(i))
          groups[first] = internal::emit_control_flow_batching(b, in, ops, ops_batched, size);
        map[v] = groups.at(first).at(result_index(in));
        is_batched[v] = true;
        continue;
      }
      map[v] = internal::emit_batching_rule(b, in, ops, ops_batched, size);
      is_batched[v] = true;
    }
    std::vector<ValueId> results;
    for (ValueId r : f.results) {
      results.push_back(is_batched[r] ? map[r] : internal::broadcast_batch(b, map[r], size));
    }
    return eliminate_dead_code(std::move(b).build(std::move(results)));
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

}  // namespace mcx::ir
