// One node of an element program: an element-wise op (or convert / is_finite) applied to earlier values of the
// same element. Backends plan fused groups as lists of these (the CPU's FusedGroup) and their code generators
// emit each node through the shared per-element rules (element_emitter.h). Plain data, no LLVM.
#pragma once

#include <vector>

#include "mcx/core/dtype.h"
#include "mcx/ir/op.h"

namespace mcx::kernelgen {

struct ElementNode {
  ir::OpKind kind;
  DType dtype;            // result dtype
  DType operand_dtype;    // dtype of the last operand (for convert, compare, is_finite, select's values)
  std::vector<int> args;  // slots: the program's leaves first, then each earlier node's value
};

}  // namespace mcx::kernelgen
