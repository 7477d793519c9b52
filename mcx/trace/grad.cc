#include "mcx/trace/grad.h"

#include "absl/strings/str_cat.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/passes.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/trace_state.h"

namespace mcx::detail {

void check_floating_inputs(const char* api, const FlatArgs& flat, const std::vector<size_t>& wrt) {
  for (size_t leaf : wrt) {
    DType t = flat.avals[leaf].dtype;
    if (!is_floating(t)) {
      throw InvalidArgument(absl::StrCat("[", api, "] argument ", arg_of_leaf(flat, leaf), " (leaf ", leaf,
                                         ", ", flat.avals[leaf].to_string(), ") has dtype ", std::string(dtype_name(t)),
                                         "; differentiation needs floating inputs (convert it with astype, or "
                                         "exclude it from argnums)"));
    }
  }
}

std::vector<Array> with_captured(const FlatArgs& flat, const TracedFunction& traced) {
  std::vector<Array> args = flat.leaves;
  args.insert(args.end(), traced.captured.begin(), traced.captured.end());
  return args;
}

std::vector<Array> value_and_grad_leaves(const char* api, const std::string& name, const FlatArgs& flat,
                                         const std::vector<size_t>& wrt,
                                         const std::function<std::vector<Array>(std::span<const Array>)>& body) {
  check_floating_inputs(api, flat, wrt);
  TracedFunction traced =
      trace_flat(absl::StrCat(api, " of '", name, "'"), name, flat.avals, flat.weak, current_scope(), body,
                 argument_leaf_names(flat));
  const std::vector<AbstractValue> outs = traced.program.result_types();
  if (outs.size() != 1 || outs[0].rank() != 0 || !is_floating(outs[0].dtype)) {
    throw InvalidArgument(absl::StrCat("[", api, "] the function must return a scalar floating array; found ",
                                       outs.size() == 1 ? outs[0].to_string() : absl::StrCat(outs.size(), " outputs")));
  }
  std::vector<int> wrt_int(wrt.begin(), wrt.end());
  ir::Program vg = value_or_throw(ir::value_and_grad_program(traced.program, wrt_int));
  return call_program(vg, with_captured(flat, traced), api, traced.mesh);
}

std::pair<std::vector<Array>, std::shared_ptr<const VjpState>> vjp_leaves(
    const std::string& name, const FlatArgs& flat,
    const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& body) {
  std::vector<size_t> all(flat.leaves.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  check_floating_inputs("vjp", flat, all);
  auto state = std::make_shared<VjpState>();
  TracedFunction traced = trace_flat(absl::StrCat("vjp of '", name, "'"), name, flat.avals, flat.weak,
                                     current_scope(), [&](std::span<const Array> tracers) {
                                       return body(tracers, state->out_tree);
                                     },
                                     argument_leaf_names(flat));
  state->args = with_captured(flat, traced);
  state->out_avals = traced.program.result_types();
  state->num_leaves = flat.leaves.size();
  state->mesh = traced.mesh;
  std::vector<Array> outs = call_program(traced.program, state->args, "vjp", state->mesh);
  std::vector<int> wrt(all.begin(), all.end());
  // The forward pass (and its prints) ran above; the pullback recomputes its values without printing again.
  state->vjp = ir::drop_side_effects(value_or_throw(ir::vjp_program(traced.program, wrt)));
  return {std::move(outs), std::move(state)};
}

std::vector<Array> vjp_apply(const VjpState& state, const std::vector<Array>& cotangents) {
  if (cotangents.size() != state.out_avals.size()) {
    throw InvalidArgument(absl::StrCat("[vjp] expected ", state.out_avals.size(), " cotangents, found ",
                                       cotangents.size()));
  }
  std::vector<Array> args = state.args;
  for (size_t i = 0; i < cotangents.size(); ++i) {
    if (cotangents[i].aval() != state.out_avals[i]) {
      throw InvalidArgument(absl::StrCat("[vjp] cotangent ", i, " must have the output's type ",
                                         state.out_avals[i].to_string(), "; found ", cotangents[i].aval().to_string()));
    }
    args.push_back(cotangents[i]);
  }
  std::vector<Array> res = call_program(state.vjp, args, "vjp", state.mesh);
  return std::vector<Array>(res.begin() + static_cast<std::ptrdiff_t>(state.out_avals.size()), res.end());
}

}  // namespace mcx::detail
