#include "mcx/ir/program.h"

namespace mcx::ir {

std::vector<AbstractValue> Program::result_types() const {
  std::vector<AbstractValue> out;
  out.reserve(results.size());
  for (ValueId v : results) out.push_back(type(v));
  return out;
}

bool structurally_equal(const Program& a, const Program& b) {
  if (a.name != b.name || a.scope.constraints() != b.scope.constraints() || a.params != b.params ||
      a.results != b.results || a.instrs.size() != b.instrs.size())
    return false;
  for (size_t i = 0; i < a.instrs.size(); ++i) {
    const Instr& x = a.instrs[i];
    const Instr& y = b.instrs[i];
    if (x.kind != y.kind || x.operands != y.operands || x.type != y.type || !(x.attrs == y.attrs)) return false;
  }
  return true;
}

}  // namespace mcx::ir
