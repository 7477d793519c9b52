#include "mcx/backend/cuda/cuda_plan_steps.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/dims.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/error.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;
using codegen::ElementKernelLeaf;
using codegen::ElementKernelSpec;
using codegen::IotaKernelSpec;

namespace {

// The lines of an array along dim d: outer (the dims before d), length (d's), inner (the dims after d).
struct Lines {
  int64_t outer = 1, length = 0, inner = 1;
};
Lines lines_along(const std::vector<int64_t>& dims, int64_t d) {
  Lines l;
  l.length = dims[d];
  for (int64_t i = 0; i < d; ++i) l.outer *= dims[i];
  for (size_t i = d + 1; i < dims.size(); ++i) l.inner *= dims[i];
  return l;
}

}  // namespace

// argsort (bitonic passes), cumsum, take, scatter_add, dynamic_slice, dynamic_update_slice and pad.
absl::StatusOr<Plan::Step> plan_indexing(PlanBuilder& b, int i) {
  const ir::Program& p = b.plan.program;
  const ir::Instr& in = p.instrs[i];
  const ValueId v = p.num_params() + i;
  Plan::Step step;
  switch (in.kind) {
    case OpKind::kArgsort: {
      // Positions sorted by a bitonic network over a padded permutation, then copied out (sort_kernel.h).
      MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(const int64_t descending, in.attrs.get_int("descending"));
      const ValueId x = in.operands[0];
      const Lines l = lines_along(b.plan.dims[x], dimension);
      const int64_t padded = codegen::bitonic_padded_length(l.length);
      const int64_t lines = l.outer * l.inner;
      const ValueId perm = b.plan.add_slot(DType::kInt32, {lines, padded});
      b.plan.steps.push_back(b.kernel_step(IotaKernelSpec{DType::kInt32, {lines, padded}, 1}, {}, {perm}, lines * padded));
      if (padded > 1) {
        const int sort_kernel = static_cast<int>(b.specs.size());
        b.specs.push_back(codegen::SortPassKernelSpec{p.type(x).dtype, l.outer, l.length, l.inner, padded,
                                                      descending != 0});
        for (int64_t k = 2; k <= padded; k *= 2) {
          for (int64_t j = k / 2; j >= 1; j /= 2) {
            Plan::Step pass;
            pass.kernel = sort_kernel;
            pass.inputs = {x};
            pass.outputs = {perm};
            pass.allocate_outputs = false;
            pass.scalars = {j, k};
            pass.n = lines * padded / 2;
            b.plan.steps.push_back(std::move(pass));
          }
        }
      }
      // out[i1, j, i2] = perm[(i1 * inner + i2) * padded + j] for j < length.
      ElementKernelSpec out;
      out.dims = {l.outer, l.length, l.inner};
      out.leaves = {ElementKernelLeaf{DType::kInt32, {l.inner * padded, 1, padded}, 0}};
      out.nodes = {kernelgen::ElementNode{OpKind::kConvert, DType::kInt32, DType::kInt32, {0}}};
      out.outputs = {0};
      step = b.kernel_step(std::move(out), {perm}, {v}, product(b.plan.dims[v]));
      break;
    }
    case OpKind::kCumsum: {
      MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
      MCX_ASSIGN_OR_RETURN(const int64_t reverse, in.attrs.get_int("reverse"));
      const Lines l = lines_along(b.plan.dims[in.operands[0]], dimension);
      step = b.kernel_step(codegen::CumsumKernelSpec{in.type.dtype, l.outer, l.length, l.inner, reverse != 0},
                           {in.operands[0]}, {v}, l.outer * l.inner);
      break;
    }
    case OpKind::kTake: {
      const std::vector<int64_t>& xd = b.plan.dims[in.operands[0]];
      step = b.kernel_step(codegen::TakeKernelSpec{in.type.dtype, p.type(in.operands[1]).dtype, xd[0],
                                                   xd[0] == 0 ? 1 : product(xd) / xd[0]},
                           {in.operands[0], in.operands[1]}, {v}, product(b.plan.dims[v]));
      break;
    }
    case OpKind::kScatterAdd: {
      // A copy of x, then the update rows added in place (indexing_kernels.h).
      const std::vector<int64_t>& xd = b.plan.dims[in.operands[0]];
      const int64_t updates = product(b.plan.dims[in.operands[1]]);
      step = b.kernel_step(contiguous_copy(in.type.dtype, xd), {in.operands[0]}, {v}, product(xd));
      if (product(xd) == 0 || updates == 0) break;
      b.plan.steps.push_back(std::move(step));
      const int64_t row_size = product(xd) / xd[0];
      step = b.kernel_step(codegen::ScatterAddKernelSpec{in.type.dtype, p.type(in.operands[1]).dtype, xd[0], row_size,
                                                         updates},
                           {in.operands[2], in.operands[1]}, {v}, row_size);
      step.allocate_outputs = false;
      break;
    }
    case OpKind::kDynamicSlice: case OpKind::kDynamicUpdateSlice: {
      // dynamic_update_slice: a copy of x, then the update written in place (indexing_kernels.h).
      const bool write = in.kind == OpKind::kDynamicUpdateSlice;
      const ValueId x = in.operands[0];
      const size_t first_start = write ? 2 : 1;
      codegen::DynamicWindowKernelSpec spec{in.type.dtype, b.plan.dims[x], b.plan.dims[write ? in.operands[1] : v], {}, write};
      std::vector<ValueId> inputs = {write ? in.operands[1] : x};
      for (size_t k = first_start; k < in.operands.size(); ++k) {
        spec.start_dtypes.push_back(p.type(in.operands[k]).dtype);
        inputs.push_back(in.operands[k]);
      }
      const int64_t window = product(spec.window);
      if (write) {
        step = b.kernel_step(contiguous_copy(in.type.dtype, b.plan.dims[x]), {x}, {v}, product(b.plan.dims[x]));
        if (window == 0) break;
        b.plan.steps.push_back(std::move(step));
      }
      step = b.kernel_step(std::move(spec), std::move(inputs), {v}, window);
      step.allocate_outputs = !write;  // the copy of x made it
      break;
    }
    case OpKind::kPad: {
      MCX_ASSIGN_OR_RETURN(Shape low_shape, in.attrs.get_dims("low"));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(low_shape));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> interior, in.attrs.get_ints("interior"));
      step = b.kernel_step(codegen::PadKernelSpec{in.type.dtype, b.plan.dims[in.operands[0]], b.plan.dims[v],
                                                  std::move(low), std::move(interior)},
                           {in.operands[0], in.operands[1]}, {v}, product(b.plan.dims[v]));
      break;
    }
    default: return absl::InternalError(absl::StrCat("[cuda_compile] plan_indexing of ", std::string(ir::op_name(in.kind))));
  }
  return step;
}

}  // namespace mcx::cuda
