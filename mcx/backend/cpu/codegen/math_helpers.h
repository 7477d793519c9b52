// Scalar math functions that generated kernels call (extern "C", linked into the JIT by address). Each
// computes one element through the interpreter's vmath (vmath.h), so a generated kernel's scalar code
// path gives the interpreter's values; in the vectorised loop the calls become libmvec vector calls
// (llvm_compiler.cc maps each name to its vector variants). Private to mcx/backend/cpu/codegen.
#pragma once

#include <string_view>
#include <vector>

namespace mcx::cpu::codegen {

struct MathHelper {
  std::string_view name;         // the symbol generated code calls, e.g. "mcx_cg_expf"
  void* address;                 // its definition in this process
  std::string_view libmvec_stem; // the glibc function whose libmvec variants vectorise it ("expf"), or ""
  int arity;                     // 1 or 2 (pow)
  bool is_double;
};

// Every helper, in a fixed order.
const std::vector<MathHelper>& math_helpers();

}  // namespace mcx::cpu::codegen
