// Which element-wise ops run together as one fused group: the fusion decision every backend's planner takes
// (the CPU's fused regions and generated kernels, the GPU's element-wise kernels), so a program fuses the same
// way on every platform. Plain code, no LLVM.
//
// In program order, a fusible op joins the first still-open group of an operand with its own dims, else opens
// one; a group closes once any of its values is read outside it (a later member could otherwise need a value
// computed after that reader).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/ir/program.h"

namespace mcx::kernelgen {

// Element-wise ops (but not remat_barrier, which must stay a step of its own), convert and is_finite.
bool is_fusible(ir::OpKind k);

struct ElementGroups {
  std::vector<int> group_of;                      // per value: its group, or -1
  std::vector<std::vector<ir::ValueId>> members;  // per group: its values in program order
  std::vector<bool> escapes;                      // per value: a result, or read outside its group
};

// Whether the platform has a kernel for fusible instruction `instr` of the program: OK, or the platform's
// error naming the instruction (returned by form_element_groups as it is).
using ElementCheck = std::function<absl::Status(const ir::Program& program, int instr)>;

// The groups of `program`, whose values have the concrete `dims` (one entry per value).
absl::StatusOr<ElementGroups> form_element_groups(const ir::Program& program,
                                                  const std::vector<std::vector<int64_t>>& dims,
                                                  const ElementCheck& check);

}  // namespace mcx::kernelgen
