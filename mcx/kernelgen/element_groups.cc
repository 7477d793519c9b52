#include "mcx/kernelgen/element_groups.h"

#include "mcx/core/error.h"

namespace mcx::kernelgen {

using ir::OpKind;
using ir::ValueId;

bool is_fusible(OpKind k) {
  return (ir::is_elementwise(k) && k != OpKind::kRematBarrier) || k == OpKind::kConvert || k == OpKind::kIsFinite;
}

absl::StatusOr<ElementGroups> form_element_groups(const ir::Program& p, const std::vector<std::vector<int64_t>>& dims,
                                                  const ElementCheck& check) {
  const int P = p.num_params();
  ElementGroups fusion;
  fusion.group_of.assign(p.num_values(), -1);
  std::vector<bool> open;
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const ir::Instr& in = p.instrs[i];
    const ValueId v = P + i;
    if (!is_fusible(in.kind)) {
      for (ValueId o : in.operands) {
        if (fusion.group_of[o] >= 0) open[fusion.group_of[o]] = false;
      }
      continue;
    }
    MCX_RETURN_IF_ERROR(check(p, i));
    int g = -1;
    for (ValueId o : in.operands) {
      const int og = fusion.group_of[o];
      if (og >= 0 && open[og] && dims[o] == dims[v]) {
        g = og;
        break;
      }
    }
    for (ValueId o : in.operands) {
      if (fusion.group_of[o] >= 0 && fusion.group_of[o] != g) open[fusion.group_of[o]] = false;
    }
    if (g < 0) {
      g = static_cast<int>(fusion.members.size());
      fusion.members.emplace_back();
      open.push_back(true);
    }
    fusion.group_of[v] = g;
    fusion.members[g].push_back(v);
  }
  fusion.escapes.assign(p.num_values(), false);
  for (ValueId r : p.results) fusion.escapes[r] = true;
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    for (ValueId o : p.instrs[i].operands) {
      if (fusion.group_of[o] >= 0 && fusion.group_of[o] != fusion.group_of[P + i]) fusion.escapes[o] = true;
    }
  }
  return fusion;
}

}  // namespace mcx::kernelgen
