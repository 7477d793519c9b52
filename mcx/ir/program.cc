#include "mcx/ir/program.h"

namespace mcx::ir {

std::vector<AbstractValue> Program::result_types() const {
  std::vector<AbstractValue> out;
  out.reserve(results.size());
  for (ValueId v : results) out.push_back(type(v));
  return out;
}

}  // namespace mcx::ir
