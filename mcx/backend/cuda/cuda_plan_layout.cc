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

namespace {

// The copy kernel of a layout op: one leaf read through strides (and an offset) over the result's dims, and an
// identity conversion as its one node.
absl::StatusOr<ElementKernelSpec> layout_copy(const Plan& plan, const ir::Instr& in, ValueId result) {
  const std::vector<int64_t>& out = plan.dims[result];
  const std::vector<int64_t>& src = plan.dims[in.operands[0]];
  const std::vector<int64_t> src_strides = codegen::contiguous_strides(src);
  ElementKernelLeaf leaf{in.type.dtype, std::vector<int64_t>(out.size(), 0), 0};
  switch (in.kind) {
    case OpKind::kBroadcastInDim: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> bd, in.attrs.get_ints("broadcast_dimensions"));
      for (size_t i = 0; i < bd.size(); ++i) {
        if (src[i] == out[bd[i]]) leaf.strides[bd[i]] = src_strides[i];  // else a size-1 dim, broadcast
      }
      break;
    }
    case OpKind::kTranspose: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> perm, in.attrs.get_ints("permutation"));
      for (size_t j = 0; j < perm.size(); ++j) leaf.strides[j] = src_strides[perm[j]];
      break;
    }
    case OpKind::kSlice: {
      MCX_ASSIGN_OR_RETURN(Shape start_shape, in.attrs.get_dims("start"));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> start, to_concrete(start_shape));
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> step, in.attrs.get_ints("strides"));
      for (size_t j = 0; j < out.size(); ++j) {
        leaf.strides[j] = src_strides[j] * step[j];
        leaf.offset += start[j] * src_strides[j];
      }
      break;
    }
    case OpKind::kReverse: {
      leaf.strides = src_strides;
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> axes, in.attrs.get_ints("dimensions"));
      for (int64_t d : axes) {
        leaf.offset += (src[d] - 1) * src_strides[d];
        leaf.strides[d] = -src_strides[d];
      }
      break;
    }
    default: return absl::InternalError("layout_copy of a non-layout op");
  }
  ElementKernelSpec spec;
  spec.dims = out;
  spec.leaves = {std::move(leaf)};
  spec.nodes = {kernelgen::ElementNode{OpKind::kConvert, in.type.dtype, in.type.dtype, {0}}};
  spec.outputs = {0};
  return spec;
}

}  // namespace

// broadcast_in_dim, transpose, slice and reverse: one strided copy; concatenate: one copy per operand into its
// window of the result.
absl::StatusOr<Plan::Step> plan_layout_op(PlanBuilder& b, int i) {
  const ir::Program& p = b.plan.program;
  const ir::Instr& in = p.instrs[i];
  const ValueId v = p.num_params() + i;
  Plan::Step step;
  switch (in.kind) {
    case OpKind::kBroadcastInDim: case OpKind::kTranspose: case OpKind::kSlice: case OpKind::kReverse: {
      MCX_ASSIGN_OR_RETURN(ElementKernelSpec spec, layout_copy(b.plan, in, v));
      step.kernel = static_cast<int>(b.specs.size());
      step.inputs = {in.operands[0]};
      step.outputs = {v};
      step.n = product(spec.dims);
      b.specs.push_back(std::move(spec));
      break;
    }
    case OpKind::kConcatenate: {
      // One copy kernel per operand into its window of the result (the first allocates it).
      MCX_ASSIGN_OR_RETURN(const int64_t dim, in.attrs.get_int("dimension"));
      const std::vector<int64_t> out_strides = codegen::contiguous_strides(b.plan.dims[v]);
      int64_t offset = 0;
      for (size_t k = 0; k < in.operands.size(); ++k) {
        const ValueId o = in.operands[k];
        ElementKernelSpec copy = contiguous_copy(in.type.dtype, b.plan.dims[o]);
        copy.out_strides = out_strides;
        copy.out_offset = offset * out_strides[dim];
        offset += b.plan.dims[o][dim];
        Plan::Step part;
        part.kernel = static_cast<int>(b.specs.size());
        part.allocate_outputs = k == 0;
        part.inputs = {o};
        part.outputs = {v};
        part.n = product(copy.dims);
        b.specs.push_back(std::move(copy));
        if (k + 1 < in.operands.size()) b.plan.steps.push_back(std::move(part));
        else step = std::move(part);
      }
      break;
    }
    default: return absl::InternalError(absl::StrCat("[cuda_compile] plan_layout_op of ", std::string(ir::op_name(in.kind))));
  }
  return step;
}

}  // namespace mcx::cuda
