// Program: a functional SSA graph with typed parameters and results.
//
// Values are numbered: parameters are 0..P-1, instruction i defines value P+i. Operands refer to earlier
// values only (the instruction list is in topological order). A Program may have symbolic dimensions; its
// SymbolicScope holds the constraints on their variables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mcx/core/dim_expr.h"
#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"

namespace mcx::ir {

using ValueId = int32_t;

struct Instr {
  OpKind kind;
  std::vector<ValueId> operands;
  Attrs attrs;
  AbstractValue type;  // the result's type (filled by the shape rule)
};

struct Program {
  std::string name = "main";
  SymbolicScope scope;
  std::vector<AbstractValue> params;
  std::vector<Instr> instrs;
  std::vector<ValueId> results;

  int num_params() const { return static_cast<int>(params.size()); }
  int num_values() const { return num_params() + static_cast<int>(instrs.size()); }
  bool is_param(ValueId v) const { return v < num_params(); }
  const Instr& defining_instr(ValueId v) const { return instrs[v - num_params()]; }
  const AbstractValue& type(ValueId v) const {
    return is_param(v) ? params[v] : instrs[v - num_params()].type;
  }
  std::vector<AbstractValue> result_types() const;
};

// Same name, scope constraint texts, parameter types, instructions (kind, operands, attributes with
// constants compared bitwise, types) and results. Value ids are compared as numbers, so two programs
// built the same way compare equal.
bool structurally_equal(const Program& a, const Program& b);

}  // namespace mcx::ir
