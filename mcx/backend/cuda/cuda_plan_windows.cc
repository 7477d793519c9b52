#include "mcx/backend/cuda/cuda_plan_steps.h"

#include "absl/strings/str_cat.h"
#include "mcx/core/dims.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/error.h"
#include "mcx/ir/window_rules.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;

// reduce_window and conv_general_dilated: one kernel each (a scalar's one-element window is its operand).
absl::StatusOr<Plan::Step> plan_window(PlanBuilder& b, int i) {
  const ir::Program& p = b.plan.program;
  const ir::Instr& in = p.instrs[i];
  const ValueId v = p.num_params() + i;
  Plan::Step step;
  switch (in.kind) {
    case OpKind::kReduceWindow: {
      const ValueId x = in.operands[0];
      if (b.plan.dims[x].empty()) {  // the one-element window of a scalar
         step.kind = Plan::Step::Kind::kAlias;
        step.value = v;
        step.source = x;
        break;
      }
      MCX_ASSIGN_OR_RETURN(const ir::ReduceWindowConfig w,
                           ir::get_reduce_window_config(in.attrs, static_cast<int>(b.plan.dims[x].size())));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(w.padding_low));
      step = b.kernel_step(codegen::ReduceWindowKernelSpec{w.reduce, in.type.dtype, b.plan.dims[x], b.plan.dims[v],
                                                           w.window_dimensions, w.window_strides, std::move(low)},
                           {x}, {v}, product(b.plan.dims[v]));
      break;
    }
    case OpKind::kConvGeneralDilated: {
      const ValueId lhs = in.operands[0], rhs = in.operands[1];
      MCX_ASSIGN_OR_RETURN(const ir::ConvConfig c,
                           ir::get_conv_config(in.attrs, static_cast<int>(b.plan.dims[lhs].size())));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(c.padding_low));
      step = b.kernel_step(codegen::ConvKernelSpec{in.type.dtype, b.plan.dims[lhs], b.plan.dims[rhs], b.plan.dims[v],
                                                   c.lhs_spec, c.rhs_spec, c.out_spec, c.window_strides,
                                                   c.lhs_dilation, c.rhs_dilation, std::move(low),
                                                   c.feature_group_count},
                           {lhs, rhs}, {v}, product(b.plan.dims[v]));
      break;
    }
    default: return absl::InternalError(absl::StrCat("[cuda_compile] plan_window of ", std::string(ir::op_name(in.kind))));
  }
  return step;
}

}  // namespace mcx::cuda
