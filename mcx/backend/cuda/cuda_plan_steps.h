// The planner's op families, private to the CUDA backend (cuda_plan.h): plan_program walks the program and hands
// each instruction of a family to its function here, which returns that instruction's step; steps it needs first
// (a transpose before a product, the partials of a long reduction, the passes of a sort) it appends to the plan
// itself. One file per family: cuda_plan_products.cc, cuda_plan_layout.cc, cuda_plan_reductions.cc,
// cuda_plan_indexing.cc, cuda_plan_windows.cc. Errors: the attributes' (InvalidArgument), unsupported()'s.
// Thread-safety: plain functions over the builder they are given.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/backend/cuda/cuda_plan.h"

namespace mcx::cuda {

using Plan = CudaExecutable::Plan;

// The plan being built and the kernels its steps launch (Step::kernel indexes specs).
struct PlanBuilder {
  Plan& plan;
  std::vector<KernelSource>& specs;
  // A step launching a new kernel made from `spec` over n elements.
  Plan::Step kernel_step(KernelSource spec, std::vector<ir::ValueId> inputs, std::vector<ir::ValueId> outputs,
                         int64_t n);
};

// Unimplemented naming instruction i of p, its op, its type and why.
absl::Status unsupported(const ir::Program& p, int i, std::string_view why);
// A copy of `src` (dims, dtype) transposed by perm: result dim j is source dim perm[j].
codegen::ElementKernelSpec transpose_copy(DType dtype, const std::vector<int64_t>& src, const std::vector<int64_t>& perm);
// A contiguous copy of an array of dims (the start of an op computed in place over a copy of its operand).
codegen::ElementKernelSpec contiguous_copy(DType dtype, const std::vector<int64_t>& dims);

// Instruction i of b.plan.program, of the family each names.
absl::StatusOr<Plan::Step> plan_product(PlanBuilder& b, int i);    // dot_general
absl::StatusOr<Plan::Step> plan_layout_op(PlanBuilder& b, int i);  // broadcast_in_dim, transpose, slice, reverse, concatenate
absl::StatusOr<Plan::Step> plan_reduction(PlanBuilder& b, int i);  // arg_max, arg_min, reduce_sum/prod/max/min
absl::StatusOr<Plan::Step> plan_indexing(PlanBuilder& b, int i);   // argsort, cumsum, take, scatter_add, dynamic_*, pad
absl::StatusOr<Plan::Step> plan_window(PlanBuilder& b, int i);     // reduce_window, conv_general_dilated

}  // namespace mcx::cuda
