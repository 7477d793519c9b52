#include "mcx/backend/cuda/cuda_plan_steps.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "mcx/core/dims.h"
#include "mcx/core/error.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;
using codegen::ReduceKernelSpec;

namespace {

// How a reduction over an array's trailing axes (rows of `length` elements) is split in two passes: `chunks`
// partials per row (a power of two dividing length, at least 32 so that a warp reads 32 neighbouring elements,
// each partial over at least 16 elements, at most 2^20 partials in all), then each row's partials. Long rows
// only: a one-thread-per-row kernel reads rows of neighbouring threads far apart (uncoalesced) and leaves the
// GPU idle when there are few rows.
struct RowSplit {
  int64_t rows = 1, length = 1, chunks = 1;
};
std::optional<RowSplit> split_rows(const std::vector<int64_t>& dims, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  for (size_t k = 0; k < axes.size(); ++k) {  // the trailing axes, in order
    if (axes[k] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(k)) return std::nullopt;
  }
  RowSplit s;
  for (int64_t d = 0; d < rank; ++d) (d < rank - static_cast<int64_t>(axes.size()) ? s.rows : s.length) *= dims[d];
  if (s.length < 2048 || s.rows == 0) return std::nullopt;
  int64_t chunks = 1;
  while (s.length % (chunks * 2) == 0 && s.length / (chunks * 2) >= 16 && s.rows * chunks * 2 <= (int64_t{1} << 20) &&
         chunks * 2 <= 4096) {
    chunks *= 2;
  }
  if (chunks < 32) return std::nullopt;
  s.chunks = chunks;
  return s;
}

}  // namespace

// arg_max, arg_min and the reductions: one kernel, or two passes for long rows (split_rows).
absl::StatusOr<Plan::Step> plan_reduction(PlanBuilder& b, int i) {
  const ir::Program& p = b.plan.program;
  const ir::Instr& in = p.instrs[i];
  const ValueId v = p.num_params() + i;
  Plan::Step step;
  switch (in.kind) {
    case OpKind::kArgMax: case OpKind::kArgMin: {
      MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
      step.kernel = static_cast<int>(b.specs.size());
      step.inputs = {in.operands[0]};
      step.outputs = {v};
      step.n = product(b.plan.dims[v]);
      b.specs.push_back(ReduceKernelSpec{in.kind, p.type(in.operands[0]).dtype, b.plan.dims[in.operands[0]],
                                          {dimension}, in.type.dtype, std::nullopt});
      break;
    }
    case OpKind::kReduceSum: case OpKind::kReduceProd: case OpKind::kReduceMax: case OpKind::kReduceMin: {
      MCX_ASSIGN_OR_RETURN(std::vector<int64_t> axes, in.attrs.get_ints("dimensions"));
      const std::vector<int64_t>& xd = b.plan.dims[in.operands[0]];
      ValueId source = in.operands[0];
      ReduceKernelSpec spec{in.kind, in.type.dtype, xd, std::move(axes), DType::kInt32, std::nullopt};
      if (const std::optional<RowSplit> split = split_rows(xd, spec.axes)) {
        // Partials first: thread (row, c) reduces elements c, c + chunks, ... of its row, so neighbouring
        // threads read neighbouring elements; then each row's partials.
        const bool narrow = in.type.dtype == DType::kFloat16 || in.type.dtype == DType::kBFloat16;
        const DType partial = narrow ? DType::kFloat32 : in.type.dtype;
        const ValueId partials = b.plan.add_slot(partial, {split->rows, split->chunks});
        b.plan.steps.push_back(b.kernel_step(ReduceKernelSpec{in.kind, in.type.dtype,
                                                              {split->rows, split->length / split->chunks, split->chunks},
                                                              {1}, DType::kInt32, partial},
                                             {source}, {partials}, split->rows * split->chunks));
        source = partials;
        spec = ReduceKernelSpec{in.kind, partial, {split->rows, split->chunks}, {1}, DType::kInt32, in.type.dtype};
      }
      step = b.kernel_step(std::move(spec), {source}, {v}, product(b.plan.dims[v]));
      break;
    }
    default: return absl::InternalError(absl::StrCat("[cuda_compile] plan_reduction of ", std::string(ir::op_name(in.kind))));
  }
  return step;
}

}  // namespace mcx::cuda
