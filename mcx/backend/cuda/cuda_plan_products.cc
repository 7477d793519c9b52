#include "mcx/backend/cuda/cuda_plan_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "mcx/core/dims.h"
#include "mcx/core/error.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;
using codegen::ElementKernelSpec;

namespace {

// How a dot_general maps onto a batched row-major product [batch, m, k] x [batch, k, n]: each operand's axes in
// the order cuBLASLt reads them (batch, then the lhs's free axes and the contracting ones; batch, contracting,
// then the rhs's free axes), and the sizes. The result's axes (batch, lhs free, rhs free) are already in order.
struct ProductLayout {
  std::vector<int64_t> lhs_perm, rhs_perm;
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

absl::StatusOr<ProductLayout> product_layout(const Plan& plan, const ir::Instr& in) {
  MCX_ASSIGN_OR_RETURN(const std::vector<int64_t> lb, in.attrs.get_ints("lhs_batch"));
  MCX_ASSIGN_OR_RETURN(const std::vector<int64_t> lc, in.attrs.get_ints("lhs_contracting"));
  MCX_ASSIGN_OR_RETURN(const std::vector<int64_t> rb, in.attrs.get_ints("rhs_batch"));
  MCX_ASSIGN_OR_RETURN(const std::vector<int64_t> rc, in.attrs.get_ints("rhs_contracting"));
  const std::vector<int64_t>& ld = plan.dims[in.operands[0]];
  const std::vector<int64_t>& rd = plan.dims[in.operands[1]];
  auto free_axes = [](size_t rank, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d) {
      if (std::find(a.begin(), a.end(), d) == a.end() && std::find(b.begin(), b.end(), d) == b.end()) f.push_back(d);
    }
    return f;
  };
  const std::vector<int64_t> lf = free_axes(ld.size(), lb, lc);
  const std::vector<int64_t> rf = free_axes(rd.size(), rb, rc);
  ProductLayout out;
  for (const auto* axes : {&lb, &lf, &lc}) out.lhs_perm.insert(out.lhs_perm.end(), axes->begin(), axes->end());
  for (const auto* axes : {&rb, &rc, &rf}) out.rhs_perm.insert(out.rhs_perm.end(), axes->begin(), axes->end());
  for (int64_t d : lb) out.batch *= ld[d];
  for (int64_t d : lf) out.m *= ld[d];
  for (int64_t d : lc) out.k *= ld[d];
  for (int64_t d : rf) out.n *= rd[d];
  return out;
}

}  // namespace

// dot_general: each operand laid out as cuBLASLt reads it (a transpose kernel where it is not), then one
// batched product.
absl::StatusOr<Plan::Step> plan_product(PlanBuilder& b, int i) {
  const ir::Program& p = b.plan.program;
  const ir::Instr& in = p.instrs[i];
  const ValueId v = p.num_params() + i;
  if (in.kind != OpKind::kDotGeneral) {
    return absl::InternalError(absl::StrCat("[cuda_compile] plan_product of ", std::string(ir::op_name(in.kind))));
  }
  Plan::Step step;
  MCX_ASSIGN_OR_RETURN(const ProductLayout layout, product_layout(b.plan, in));
  if (!gemm_supports(in.type.dtype) || p.type(in.operands[0]).dtype != in.type.dtype ||
      p.type(in.operands[1]).dtype != in.type.dtype) {
    return unsupported(p, i, "the cuda platform multiplies float32, float16, bfloat16 and float64 operands "
                             "of the result's dtype only");
  }
  // Each operand laid out as cuBLASLt takes it, through a transpose kernel where it is not already.
  std::vector<ValueId> operands;
  for (int side = 0; side < 2; ++side) {
    const ValueId o = in.operands[side];
    const std::vector<int64_t>& perm = side == 0 ? layout.lhs_perm : layout.rhs_perm;
    bool identity = true;
    for (size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == static_cast<int64_t>(d);
    if (identity) {
      operands.push_back(o);
      continue;
    }
    ElementKernelSpec copy = transpose_copy(in.type.dtype, b.plan.dims[o], perm);
    const ValueId t = b.plan.add_slot(in.type.dtype, copy.dims);
    const int64_t n = product(copy.dims);
    b.plan.steps.push_back(b.kernel_step(std::move(copy), {o}, {t}, n));
    operands.push_back(t);
  }
  step.kind = Plan::Step::Kind::kGemm;
  step.inputs = operands;
  step.outputs = {v};
  step.gemm = GemmShape{in.type.dtype, layout.batch, layout.m, layout.n, layout.k};
  return step;
}

}  // namespace mcx::cuda
