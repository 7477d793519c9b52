#include "mcx/backend/cuda/cuda_plan.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/cuda_plan_steps.h"
#include "mcx/core/dims.h"
#include "mcx/core/dim_expr.h"
#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/kernelgen/element_groups.h"

namespace mcx::cuda {

using ir::OpKind;
using ir::ValueId;

namespace {

using codegen::ElementKernelLeaf;
using codegen::ElementKernelSpec;
using codegen::IotaKernelSpec;
using codegen::ReduceKernelSpec;

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

}  // namespace

absl::Status unsupported(const ir::Program& p, int i, std::string_view why) {
  const ir::Instr& in = p.instrs[i];
  return absl::UnimplementedError(absl::StrCat("[cuda_compile] instruction ", i, " (", std::string(ir::op_name(in.kind)),
                                               " -> ", in.type.to_string(), ") of @", p.name, ": ", std::string(why)));
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

// A contiguous copy of an array of dims (the start of an op computed in place over a copy of its operand).
ElementKernelSpec contiguous_copy(DType dtype, const std::vector<int64_t>& dims) {
  std::vector<int64_t> same_axes(dims.size());
  std::iota(same_axes.begin(), same_axes.end(), 0);
  return transpose_copy(dtype, dims, same_axes);
}

Plan::Step PlanBuilder::kernel_step(KernelSource spec, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
                                    int64_t n) {
  Plan::Step s;
  s.kernel = static_cast<int>(specs.size());
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.n = n;
  specs.push_back(std::move(spec));
  return s;
}

// The plan and the kernels it launches (Step::kernel indexes them).
absl::StatusOr<std::pair<std::unique_ptr<Plan>, std::vector<KernelSource>>> plan_program(const ir::Program& program) {
  auto plan = std::make_unique<Plan>();
  std::vector<KernelSource> specs;
  PlanBuilder b{*plan, specs};
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
      step.n = product(spec.dims);
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
          MCX_ASSIGN_OR_RETURN(step, plan_product(b, i));
          break;
        }
        case OpKind::kBroadcastInDim: case OpKind::kTranspose: case OpKind::kSlice: case OpKind::kReverse:
        case OpKind::kConcatenate: {
          MCX_ASSIGN_OR_RETURN(step, plan_layout_op(b, i));
          break;
        }
        case OpKind::kThreefry2x32:
          step.kernel = static_cast<int>(specs.size());
          step.inputs = {in.operands[0], in.operands[1]};
          step.outputs = {v};
          step.n = product(plan->dims[v]) / 2;  // pairs
          specs.push_back(codegen::ThreefryKernelSpec{});
          break;
        case OpKind::kIota: {
          MCX_ASSIGN_OR_RETURN(const int64_t dimension, in.attrs.get_int("dimension"));
          step.kernel = static_cast<int>(specs.size());
          step.outputs = {v};
          step.n = product(plan->dims[v]);
          specs.push_back(IotaKernelSpec{in.type.dtype, plan->dims[v], dimension});
          break;
        }
        case OpKind::kArgMax: case OpKind::kArgMin: case OpKind::kReduceSum: case OpKind::kReduceProd:
        case OpKind::kReduceMax: case OpKind::kReduceMin: {
          MCX_ASSIGN_OR_RETURN(step, plan_reduction(b, i));
          break;
        }
        case OpKind::kArgsort: case OpKind::kCumsum: case OpKind::kTake: case OpKind::kScatterAdd:
        case OpKind::kDynamicSlice: case OpKind::kDynamicUpdateSlice: case OpKind::kPad: {
          MCX_ASSIGN_OR_RETURN(step, plan_indexing(b, i));
          break;
        }
        case OpKind::kReduceWindow: case OpKind::kConvGeneralDilated: {
          MCX_ASSIGN_OR_RETURN(step, plan_window(b, i));
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
          step.kind = Plan::Step::Kind::kSpmd;  // nccl_spmd.h
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
