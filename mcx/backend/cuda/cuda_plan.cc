#include "mcx/backend/cuda/cuda_plan.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/window_rules.h"
#include "mcx/kernelgen/element_groups.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;

namespace {

using Plan = CudaExecutable::Plan;
using codegen::ElementKernelLeaf;
using codegen::ElementKernelSpec;
using codegen::IotaKernelSpec;
using codegen::ReduceKernelSpec;

absl::Status unsupported(const ir::Program& p, int i, std::string_view why) {
  const ir::Instr& in = p.instrs[i];
  return absl::UnimplementedError(absl::StrCat("[cuda_compile] instruction ", i, " (", std::string(ir::op_name(in.kind)),
                                               " -> ", in.type.to_string(), ") of @", p.name, ": ", std::string(why)));
}

absl::StatusOr<ir::Program> prepare(const ir::Program& program) {
  MCX_RETURN_IF_ERROR(ir::verify(program));
  for (const ir::Instr& in : program.instrs) {
    if (in.kind == OpKind::kShardMap) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda_compile] program @", program.name,
                                                     " holds a shard_map; it runs only partitioned over its mesh"));
    }
  }
  if (ir::has_custom_calls(program)) return ir::inline_custom_calls(program);
  return program;
}

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

// A copy of `src` (dims, dtype) transposed by perm: result dim j is source dim perm[j].
ElementKernelSpec transpose_copy(DType dtype, const std::vector<int64_t>& src, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> src_strides = codegen::contiguous_strides(src);
  ElementKernelSpec spec;
  ElementKernelLeaf leaf{dtype, {}, 0};
  for (int64_t d : perm) {
    spec.dims.push_back(src[d]);
    leaf.strides.push_back(src_strides[d]);
  }
  spec.leaves = {std::move(leaf)};
  spec.nodes = {kernelgen::ElementNode{OpKind::kConvert, dtype, dtype, {0}}};
  spec.outputs = {0};
  return spec;
}

int64_t count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

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

// A contiguous copy of an array of dims (the start of an op computed in place over a copy of its operand).
ElementKernelSpec contiguous_copy(DType dtype, const std::vector<int64_t>& dims) {
  std::vector<int64_t> same_axes(dims.size());
  std::iota(same_axes.begin(), same_axes.end(), 0);
  return transpose_copy(dtype, dims, same_axes);
}

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

// The plan and the kernels it launches (Step::kernel indexes them).
absl::StatusOr<std::pair<std::unique_ptr<Plan>, std::vector<KernelSource>>> plan_program(const ir::Program& program) {
  auto plan = std::make_unique<Plan>();
  std::vector<KernelSource> specs;
  // A step launching a new kernel made from `spec` over n elements.
  auto kernel_step = [&](KernelSource spec, std::vector<ValueId> inputs, std::vector<ValueId> outputs, int64_t n) {
    Plan::Step s;
    s.kernel = static_cast<int>(specs.size());
    s.inputs = std::move(inputs);
    s.outputs = std::move(outputs);
    s.n = n;
    specs.push_back(std::move(spec));
    return s;
  };
  MCX_ASSIGN_OR_RETURN(plan->program, prepare(program));
  const ir::Program& p = plan->program;
  const int P = p.num_params();
  for (ValueId v = 0; v < p.num_values(); ++v) {
    absl::StatusOr<std::vector<int64_t>> d = to_concrete(p.type(v).shape);
    if (!d.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("[cuda_compile] value ", v, " has symbolic type ",
                                                     p.type(v).to_string(), "; specialise the program first"));
    }
    plan->dims.push_back(*std::move(d));
    plan->dtypes.push_back(p.type(v).dtype);
  }
  const std::vector<int> sibling_firsts = ir::sibling_group_firsts(p);
  std::map<int, size_t> group_steps;  // the first instruction of a sibling group -> its step
  MCX_ASSIGN_OR_RETURN(const kernelgen::ElementGroups groups,
                       kernelgen::form_element_groups(p, plan->dims, [](const ir::Program&, int) { return absl::OkStatus(); }));
  for (int i = 0; i < static_cast<int>(p.instrs.size()); ++i) {
    const ir::Instr& in = p.instrs[i];
    const ValueId v = P + i;
    Plan::Step step;
    if (const int g = groups.group_of[v]; g >= 0) {
      const std::vector<ValueId>& members = groups.members[g];
      if (members.back() != v) continue;  // the group runs where its last member is
      ElementKernelSpec spec;
      spec.dims = plan->dims[v];
      std::map<ValueId, int> slot;  // leaves first, in first-use order, then members
      std::vector<ValueId> leaves;
      for (ValueId m : members) {
        for (ValueId o : p.defining_instr(m).operands) {
          if (groups.group_of[o] == g || slot.count(o) > 0) continue;
          slot[o] = static_cast<int>(leaves.size());
          leaves.push_back(o);
          spec.leaves.push_back({p.type(o).dtype, codegen::contiguous_strides(plan->dims[o]), 0});
        }
      }
      for (size_t k = 0; k < members.size(); ++k) {
        const ir::Instr& mi = p.defining_instr(members[k]);
        kernelgen::ElementNode node{mi.kind, mi.type.dtype, p.type(mi.operands.back()).dtype, {}};
        for (ValueId o : mi.operands) node.args.push_back(slot.at(o));
        slot[members[k]] = static_cast<int>(leaves.size() + k);
        spec.nodes.push_back(std::move(node));
        if (groups.escapes[members[k]]) {
          spec.outputs.push_back(static_cast<int>(k));
          step.outputs.push_back(members[k]);
        }
      }
      step.kernel = static_cast<int>(specs.size());
      step.inputs = leaves;
      step.n = count(spec.dims);
      specs.push_back(std::move(spec));
    } else {
      switch (in.kind) {
        case OpKind::kConstant: {
          MCX_ASSIGN_OR_RETURN(Buffer c, in.attrs.get_buffer("value"));
          plan->constants[v] = std::move(c);
          continue;
        }
        case OpKind::kReshape:
          step.kind = Plan::Step::Kind::kAlias;
          step.value = v;
          step.source = in.operands[0];
          break;
        case OpKind::kDotGeneral: {
          MCX_ASSIGN_OR_RETURN(const ProductLayout layout, product_layout(*plan, in));
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
            ElementKernelSpec copy = transpose_copy(in.type.dtype, plan->dims[o], perm);
            const ValueId t = plan->add_slot(in.type.dtype, copy.dims);
            Plan::Step move;
            move.kernel = static_cast<int>(specs.size());
            move.inputs = {o};
            move.outputs = {t};
            move.n = count(copy.dims);
            specs.push_back(std::move(copy));
            plan->steps.push_back(std::move(move));
            operands.push_back(t);
          }
          step.kind = Plan::Step::Kind::kGemm;
          step.inputs = operands;
          step.outputs = {v};
          step.gemm = GemmShape{in.type.dtype, layout.batch, layout.m, layout.n, layout.k};
          break;
        }
        case OpKind::kBroadcastInDim: case OpKind::kTranspose: case OpKind::kSlice: case OpKind::kReverse: {
          MCX_ASSIGN_OR_RETURN(ElementKernelSpec spec, layout_copy(*plan, in, v));
          step.kernel = static_cast<int>(specs.size());
          step.inputs = {in.operands[0]};
          step.outputs = {v};
          step.n = count(spec.dims);
          specs.push_back(std::move(spec));
          break;
        }
        case OpKind::kConcatenate: {
          // One copy kernel per operand into its window of the result (the first allocates it).
          MCX_ASSIGN_OR_RETURN(const int64_t dim, in.attrs.get_int("dimension"));
          const std::vector<int64_t> out_strides = codegen::contiguous_strides(plan->dims[v]);
          int64_t offset = 0;
          for (size_t k = 0; k < in.operands.size(); ++k) {
            const ValueId o = in.operands[k];
            ElementKernelSpec copy = contiguous_copy(in.type.dtype, plan->dims[o]);
            copy.out_strides = out_strides;
            copy.out_offset = offset * out_strides[dim];
            offset += plan->dims[o][dim];
            Plan::Step part;
            part.kernel = static_cast<int>(specs.size());
            part.allocate_outputs = k == 0;
            part.inputs = {o};
            part.outputs = {v};
            part.n = count(copy.dims);
            specs.push_back(std::move(copy));
            if (k + 1 < in.operands.size()) plan->steps.push_back(std::move(part));
            else step = std::move(part);
          }
          break;
        }
        case OpKind::kThreefry2x32:
          step.kernel = static_cast<int>(specs.size());
          step.inputs = {in.operands[0], in.operands[1]};
          step.outputs = {v};
          step.n = count(plan->dims[v]) / 2;  // pairs
          specs.push_back(codegen::ThreefryKernelSpec{});
          break;
        case OpKind::kIota: {
          MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
          step.kernel = static_cast<int>(specs.size());
          step.outputs = {v};
          step.n = count(plan->dims[v]);
          specs.push_back(IotaKernelSpec{in.type.dtype, plan->dims[v], dimension});
          break;
        }
        case OpKind::kArgMax: case OpKind::kArgMin: {
          MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
          step.kernel = static_cast<int>(specs.size());
          step.inputs = {in.operands[0]};
          step.outputs = {v};
          step.n = count(plan->dims[v]);
          specs.push_back(ReduceKernelSpec{in.kind, p.type(in.operands[0]).dtype, plan->dims[in.operands[0]],
                                           {dimension}, in.type.dtype});
          break;
        }
        case OpKind::kReduceSum: case OpKind::kReduceProd: case OpKind::kReduceMax: case OpKind::kReduceMin: {
          MCX_ASSIGN_OR_RETURN(std::vector<int64_t> axes, in.attrs.get_ints("dimensions"));
          const std::vector<int64_t>& xd = plan->dims[in.operands[0]];
          ValueId source = in.operands[0];
          ReduceKernelSpec spec{in.kind, in.type.dtype, xd, std::move(axes)};
          if (const std::optional<RowSplit> split = split_rows(xd, spec.axes)) {
            // Partials first: thread (row, c) reduces elements c, c + chunks, ... of its row, so neighbouring
            // threads read neighbouring elements; then each row's partials.
            const bool narrow = in.type.dtype == DType::kFloat16 || in.type.dtype == DType::kBFloat16;
            const DType partial = narrow ? DType::kFloat32 : in.type.dtype;
            const ValueId partials = plan->add_slot(partial, {split->rows, split->chunks});
            plan->steps.push_back(kernel_step(ReduceKernelSpec{in.kind, in.type.dtype,
                                                               {split->rows, split->length / split->chunks, split->chunks},
                                                               {1}, DType::kInt32, partial},
                                              {source}, {partials}, split->rows * split->chunks));
            source = partials;
            spec = ReduceKernelSpec{in.kind, partial, {split->rows, split->chunks}, {1}, DType::kInt32, in.type.dtype};
          }
          step = kernel_step(std::move(spec), {source}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kArgsort: {
          // Positions sorted by a bitonic network over a padded permutation, then copied out (sort_kernel.h).
          MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
          MCX_ASSIGN_OR_RETURN(const int64_t descending, in.attrs.get_int("descending"));
          const ValueId x = in.operands[0];
          const Lines l = lines_along(plan->dims[x], dimension);
          const int64_t padded = codegen::bitonic_padded_length(l.length);
          const int64_t lines = l.outer * l.inner;
          const ValueId perm = plan->add_slot(DType::kInt32, {lines, padded});
          plan->steps.push_back(kernel_step(IotaKernelSpec{DType::kInt32, {lines, padded}, 1}, {}, {perm}, lines * padded));
          if (padded > 1) {
            const int sort_kernel = static_cast<int>(specs.size());
            specs.push_back(codegen::SortPassKernelSpec{p.type(x).dtype, l.outer, l.length, l.inner, padded,
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
                plan->steps.push_back(std::move(pass));
              }
            }
          }
          // out[i1, j, i2] = perm[(i1 * inner + i2) * padded + j] for j < length.
          ElementKernelSpec out;
          out.dims = {l.outer, l.length, l.inner};
          out.leaves = {ElementKernelLeaf{DType::kInt32, {l.inner * padded, 1, padded}, 0}};
          out.nodes = {kernelgen::ElementNode{OpKind::kConvert, DType::kInt32, DType::kInt32, {0}}};
          out.outputs = {0};
          step = kernel_step(std::move(out), {perm}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kCumsum: {
          MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
          MCX_ASSIGN_OR_RETURN(const int64_t reverse, in.attrs.get_int("reverse"));
          const Lines l = lines_along(plan->dims[in.operands[0]], dimension);
          step = kernel_step(codegen::CumsumKernelSpec{in.type.dtype, l.outer, l.length, l.inner, reverse != 0},
                             {in.operands[0]}, {v}, l.outer * l.inner);
          break;
        }
        case OpKind::kTake: {
          const std::vector<int64_t>& xd = plan->dims[in.operands[0]];
          step = kernel_step(codegen::TakeKernelSpec{in.type.dtype, p.type(in.operands[1]).dtype, xd[0],
                                                     xd[0] == 0 ? 1 : count(xd) / xd[0]},
                             {in.operands[0], in.operands[1]}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kScatterAdd: {
          // A copy of x, then the update rows added in place (indexing_kernels.h).
          const std::vector<int64_t>& xd = plan->dims[in.operands[0]];
          const int64_t updates = count(plan->dims[in.operands[1]]);
          step = kernel_step(contiguous_copy(in.type.dtype, xd), {in.operands[0]}, {v}, count(xd));
          if (count(xd) == 0 || updates == 0) break;
          plan->steps.push_back(std::move(step));
          const int64_t row_size = count(xd) / xd[0];
          step = kernel_step(codegen::ScatterAddKernelSpec{in.type.dtype, p.type(in.operands[1]).dtype, xd[0], row_size,
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
          codegen::DynamicWindowKernelSpec spec{in.type.dtype, plan->dims[x], plan->dims[write ? in.operands[1] : v], {}, write};
          std::vector<ValueId> inputs = {write ? in.operands[1] : x};
          for (size_t k = first_start; k < in.operands.size(); ++k) {
            spec.start_dtypes.push_back(p.type(in.operands[k]).dtype);
            inputs.push_back(in.operands[k]);
          }
          const int64_t window = count(spec.window);
          if (write) {
            step = kernel_step(contiguous_copy(in.type.dtype, plan->dims[x]), {x}, {v}, count(plan->dims[x]));
            if (window == 0) break;
            plan->steps.push_back(std::move(step));
          }
          step = kernel_step(std::move(spec), std::move(inputs), {v}, window);
          step.allocate_outputs = !write;  // the copy of x made it
          break;
        }
        case OpKind::kPad: {
          MCX_ASSIGN_OR_RETURN(Shape low_shape, in.attrs.get_dims("low"));
          MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(low_shape));
          MCX_ASSIGN_OR_RETURN(std::vector<int64_t> interior, in.attrs.get_ints("interior"));
          step = kernel_step(codegen::PadKernelSpec{in.type.dtype, plan->dims[in.operands[0]], plan->dims[v],
                                                    std::move(low), std::move(interior)},
                             {in.operands[0], in.operands[1]}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kReduceWindow: {
          const ValueId x = in.operands[0];
          if (plan->dims[x].empty()) {  // the one-element window of a scalar
            step.kind = Plan::Step::Kind::kAlias;
            step.value = v;
            step.source = x;
            break;
          }
          MCX_ASSIGN_OR_RETURN(const ir::ReduceWindowConfig w,
                               ir::get_reduce_window_config(in.attrs, static_cast<int>(plan->dims[x].size())));
          MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(w.padding_low));
          step = kernel_step(codegen::ReduceWindowKernelSpec{w.reduce, in.type.dtype, plan->dims[x], plan->dims[v],
                                                             w.window_dimensions, w.window_strides, std::move(low)},
                             {x}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kConvGeneralDilated: {
          const ValueId lhs = in.operands[0], rhs = in.operands[1];
          MCX_ASSIGN_OR_RETURN(const ir::ConvConfig c,
                               ir::get_conv_config(in.attrs, static_cast<int>(plan->dims[lhs].size())));
          MCX_ASSIGN_OR_RETURN(std::vector<int64_t> low, to_concrete(c.padding_low));
          step = kernel_step(codegen::ConvKernelSpec{in.type.dtype, plan->dims[lhs], plan->dims[rhs], plan->dims[v],
                                                     c.lhs_spec, c.rhs_spec, c.out_spec, c.window_strides,
                                                     c.lhs_dilation, c.rhs_dilation, std::move(low),
                                                     c.feature_group_count},
                             {lhs, rhs}, {v}, count(plan->dims[v]));
          break;
        }
        case OpKind::kWhile: case OpKind::kScan: case OpKind::kCond: {
          // A sibling group runs once, at its first instruction; the others take their result from it.
          const int first = sibling_firsts[i];
          const int result = ir::result_index(in);
          if (first != i) {
            Plan::Step& group = plan->steps[group_steps.at(first)];
            const ValueId placeholder = group.outputs[result];
            if (placeholder >= static_cast<ValueId>(p.num_values())) {  // not yet a program value: this is it
              group.outputs[result] = v;
              continue;
            }
            step.kind = Plan::Step::Kind::kAlias;  // the same result again
            step.value = v;
            step.source = placeholder;
            break;
          }
          MCX_ASSIGN_OR_RETURN(ControlFlowOp op, ControlFlowOp::of(in));
          std::vector<AbstractValue> operand_types;
          for (ValueId o : in.operands) operand_types.push_back(p.type(o));
          MCX_ASSIGN_OR_RETURN(const std::vector<AbstractValue> result_types,
                               ir::control_flow_result_types(in.kind, operand_types, in.attrs, SymbolicScope{}));
          step.kind = Plan::Step::Kind::kControlFlow;
          step.allocate_outputs = false;  // the regions' results become the outputs
          step.control_flow = static_cast<int>(plan->control_flows.size());
          step.inputs = in.operands;
          for (size_t r = 0; r < result_types.size(); ++r) {  // placeholders until the siblings are met
            MCX_ASSIGN_OR_RETURN(std::vector<int64_t> d, to_concrete(result_types[r].shape));
            step.outputs.push_back(plan->add_slot(result_types[r].dtype, std::move(d)));
          }
          step.outputs[result] = v;
          plan->control_flows.push_back(std::move(op));
          group_steps[i] = plan->steps.size();
          break;
        }
        case OpKind::kDebugPrint:
          step.kind = Plan::Step::Kind::kDebugPrint;
          step.instr = i;
          step.inputs = in.operands;
          step.outputs = {v};
          break;
        case OpKind::kAllReduce: case OpKind::kAllGather: case OpKind::kReduceScatter: case OpKind::kAllToAll:
        case OpKind::kCollectivePermute: case OpKind::kAxisIndex:
          step.kind = Plan::Step::Kind::kStagedSpmd;  // staged_spmd.h
          step.instr = i;
          step.inputs = in.operands;
          step.outputs = {v};
          break;
        case OpKind::kRematBarrier: case OpKind::kShardingConstraint:
          if (in.operands.size() != 1) return unsupported(p, i, "expected one operand");
          step.kind = Plan::Step::Kind::kAlias;
          step.value = v;
          step.source = in.operands[0];
          break;
        default:
          return unsupported(p, i, "the cuda platform has no kernel for this op yet (docs/gpu.md lists what runs)");
      }
    }
    plan->steps.push_back(std::move(step));
  }
  // Each value is released after the last step that reads it, unless it is a result.
  std::vector<int> last(plan->dims.size(), -1);
  for (int s = 0; s < static_cast<int>(plan->steps.size()); ++s) {
    const Plan::Step& st = plan->steps[s];
    if (st.kind == Plan::Step::Kind::kAlias) last[st.source] = s;
    for (ValueId o : st.inputs) last[o] = s;
  }
  for (ValueId r : p.results) last[r] = -1;
  for (ValueId v = 0; v < static_cast<ValueId>(plan->dims.size()); ++v) {
    if (last[v] >= 0) plan->steps[last[v]].release.push_back(v);
  }
  return std::make_pair(std::move(plan), std::move(specs));
}

}  // namespace mcx::cuda
