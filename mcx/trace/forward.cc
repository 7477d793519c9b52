#include "mcx/trace/forward.h"

#include "absl/strings/str_cat.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/passes.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/ops.h"
#include "mcx/trace/trace_state.h"

namespace mcx::detail {
namespace {

std::vector<size_t> all_leaves(const FlatArgs& flat) {
  std::vector<size_t> all(flat.leaves.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

// Traces body over the primals' leaves (all of them differentiated).
TracedFunction trace_for(const char* api, const std::string& name, const FlatArgs& primals, const LeafBody& body,
                         TreeDef& out_tree) {
  check_floating_inputs(api, primals, all_leaves(primals));
  return trace_flat(absl::StrCat(api, " of '", name, "'"), name, primals.avals, primals.weak, current_scope(),
                    [&](std::span<const Array> tracers) { return body(tracers, out_tree); },
                    argument_leaf_names(primals));
}

// The same leaves as program parameter indices.
std::vector<int> leaf_params(const FlatArgs& primals) {
  const std::vector<size_t> all = all_leaves(primals);
  return std::vector<int>(all.begin(), all.end());
}

void check_tangent_types(const char* api, const std::vector<AbstractValue>& avals, const std::vector<Array>& tangents) {
  if (tangents.size() != avals.size()) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected ", avals.size(), " tangent leaves, found ", tangents.size()));
  }
  for (size_t i = 0; i < tangents.size(); ++i) {
    if (tangents[i].aval() != avals[i]) {
      throw InvalidArgument(absl::StrCat("[", api, "] tangent ", i, " must have its primal's type ",
                                         avals[i].to_string(), "; found ", tangents[i].aval().to_string()));
    }
  }
}

// Concrete dims of an array a Jacobian is taken over.
std::vector<int64_t> static_dims(const char* api, const char* what, const Array& a) {
  absl::StatusOr<std::vector<int64_t>> d = to_concrete(a.shape());
  if (!d.ok()) {
    throw InvalidArgument(absl::StrCat("[", api, "] the function's ", what, " has symbolic shape ",
                                       a.aval().to_string(), "; a Jacobian needs static shapes"));
  }
  return *std::move(d);
}

int64_t num_elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The standard basis of the space of arrays shaped like `like` (n elements), stacked: [n, like dims...].
Array standard_basis(const Array& like, int64_t n) {
  std::vector<int64_t> dims{n};
  for (const DimExpr& d : like.shape()) dims.push_back(*d.constant_value());
  return reshape(eye(n, like.dtype()), concrete_shape(dims));
}

// The program evaluated once per basis vector, as one batched program: params the shared arguments, then
// the basis stacked along axis 0; its first result gains the leading axis.
Array batched_over_basis(const char* api, const ir::Program& program, std::vector<Array> shared, const Array& basis,
                         int64_t n, const std::optional<Mesh>& mesh) {
  std::vector<bool> batched(shared.size(), false);
  batched.push_back(true);
  ir::Program batched_program = value_or_throw(ir::vmap_program(program, batched, DimExpr(n)));
  shared.push_back(basis);
  return call_program(batched_program, shared, api, mesh)[0];
}

}  // namespace

void check_tangents(const char* api, const FlatArgs& primals, const TreeDef& tangent_tree,
                    const std::vector<Array>& tangents) {
  const TreeDef primal_tree = TreeDef::tuple(primals.defs);
  if (tangent_tree != primal_tree) {
    throw InvalidArgument(absl::StrCat("[", api, "] the tangents' structure ", tangent_tree.to_string(),
                                       " differs from the primals' ", primal_tree.to_string()));
  }
  check_tangent_types(api, primals.avals, tangents);
}

std::vector<Array> jvp_leaves(const std::string& name, const FlatArgs& primals, const std::vector<Array>& tangents,
                              const LeafBody& body, TreeDef& out_tree) {
  check_tangent_types("jvp", primals.avals, tangents);
  TracedFunction traced = trace_for("jvp", name, primals, body, out_tree);
  ir::Program program = value_or_throw(ir::jvp_program(traced.program, leaf_params(primals)));
  std::vector<Array> args = with_captured(primals, traced);
  args.insert(args.end(), tangents.begin(), tangents.end());
  return call_program(program, args, "jvp", traced.mesh);
}

std::pair<std::vector<Array>, std::shared_ptr<const LinearState>> linearize_leaves(const std::string& name,
                                                                                   const FlatArgs& primals,
                                                                                   const LeafBody& body) {
  auto state = std::make_shared<LinearState>();
  TracedFunction traced = trace_for("linearize", name, primals, body, state->out_tree);
  ir::LinearizedPrograms lin = value_or_throw(ir::linearize_programs(traced.program, leaf_params(primals)));
  std::vector<Array> res = call_program(lin.primal, with_captured(primals, traced), "linearize", traced.mesh);
  state->mesh = traced.mesh;
  const size_t num_outputs = res.size() - static_cast<size_t>(lin.num_residuals);
  state->linear = std::move(lin.linear);
  state->residuals.assign(res.begin() + static_cast<std::ptrdiff_t>(num_outputs), res.end());
  state->in_avals = primals.avals;
  res.resize(num_outputs);
  return {std::move(res), std::move(state)};
}

std::vector<Array> linear_apply(const LinearState& state, const std::vector<Array>& tangents, const char* api) {
  check_tangent_types(api, state.in_avals, tangents);
  std::vector<Array> args = state.residuals;
  args.insert(args.end(), tangents.begin(), tangents.end());
  return call_program(state.linear, args, api, state.mesh);
}

Array jacobian(const char* api, const std::string& name, const std::function<Array(const Array&)>& g,
               const Array& x, bool forward) {
  FlatArgs flat = flatten_args(x);
  check_floating_inputs(api, flat, {0});
  const std::vector<int64_t> x_dims = static_dims(api, "input", x);
  LeafBody body = [&](std::span<const Array> tracers, TreeDef& tree) {
    tree = TreeDef::leaf();
    return std::vector<Array>{g(tracers[0])};
  };
  auto check_output = [&](const Array& y) {
    if (!is_floating(y.dtype())) {
      throw InvalidArgument(absl::StrCat("[", api, "] the function's output has dtype ", std::string(dtype_name(y.dtype())),
                                         "; a Jacobian needs a floating output"));
    }
    return static_dims(api, "output", y);
  };
  std::vector<int64_t> y_dims;
  Array stacked;  // forward: [x elements, y dims...]; reverse: [y elements, x dims...]
  int64_t n = 0;
  if (forward) {
    auto [outs, state] = linearize_leaves(name, flat, body);
    y_dims = check_output(outs[0]);
    n = num_elements(x_dims);
    if (n > 0) stacked = batched_over_basis(api, state->linear, state->residuals, standard_basis(x, n), n, state->mesh);
  } else {
    auto [outs, state] = vjp_leaves(name, flat, body);
    y_dims = check_output(outs[0]);
    n = num_elements(y_dims);
    // The pullback alone: the vjp program's gradient result, without the primal outputs.
    ir::Program pullback = state->vjp;
    pullback.results = {pullback.results.back()};
    pullback = ir::eliminate_dead_code(pullback);
    if (n > 0) stacked = batched_over_basis(api, pullback, state->args, standard_basis(outs[0], n), n, state->mesh);
  }
  std::vector<int64_t> j_dims = y_dims;
  j_dims.insert(j_dims.end(), x_dims.begin(), x_dims.end());
  if (n == 0) return zeros(concrete_shape(j_dims), x.dtype());
  if (forward) {
    // [x elements, y dims...] -> [y dims..., x elements]
    std::vector<int64_t> perm;
    for (size_t d = 1; d <= y_dims.size(); ++d) perm.push_back(static_cast<int64_t>(d));
    perm.push_back(0);
    stacked = transpose(stacked, std::move(perm));
  }
  return reshape(stacked, concrete_shape(j_dims));
}

namespace {

// The one floating dtype of `leaves` (what names them in the error: "argument leaf", "output leaf").
DType common_floating_dtype(const char* api, const char* what, const std::vector<Array>& leaves) {
  if (leaves.empty()) throw InvalidArgument(absl::StrCat("[", api, "] the function has no ", what, "s"));
  const DType t = leaves[0].dtype();
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!is_floating(leaves[i].dtype()) || leaves[i].dtype() != t) {
      throw InvalidArgument(absl::StrCat("[", api, "] every ", what, " must have one floating dtype (", what, " 0 is ",
                                         leaves[0].aval().to_string(), "); ", what, " ", i, " is ",
                                         leaves[i].aval().to_string()));
    }
  }
  return t;
}

Array raveled_concat(const std::vector<Array>& leaves) {
  std::vector<Array> flat;
  for (const Array& a : leaves) flat.push_back(reshape(a, Shape{DimExpr(static_cast<int64_t>(a.size()))}));
  return flat.size() == 1 ? flat[0] : concatenate(flat, 0);
}

}  // namespace

std::vector<std::vector<Array>> jacobian_blocks(const char* api, const std::string& name,
                                                const std::function<std::vector<Array>(std::span<const Array>)>& g,
                                                const std::vector<Array>& wrt, bool forward) {
  common_floating_dtype(api, "argument leaf", wrt);
  std::vector<std::vector<int64_t>> in_dims;
  std::vector<int64_t> in_offsets{0};
  for (const Array& x : wrt) {
    in_dims.push_back(static_dims(api, "input", x));
    in_offsets.push_back(in_offsets.back() + num_elements(in_dims.back()));
  }
  std::vector<std::vector<int64_t>> out_dims;
  std::vector<int64_t> out_offsets{0};
  const Array jac = jacobian(api, name, [&](const Array& flat_x) {
    std::vector<Array> xs;
    for (size_t k = 0; k < wrt.size(); ++k) {
      xs.push_back(reshape(slice(flat_x, Shape{DimExpr(in_offsets[k])}, Shape{DimExpr(in_offsets[k + 1])}),
                           concrete_shape(in_dims[k])));
    }
    std::vector<Array> outs = g(xs);
    common_floating_dtype(api, "output leaf", outs);
    out_dims.clear();
    out_offsets.assign(1, 0);
    for (const Array& y : outs) {
      out_dims.push_back(static_dims(api, "output", y));
      out_offsets.push_back(out_offsets.back() + num_elements(out_dims.back()));
    }
    return raveled_concat(outs);
  }, raveled_concat(wrt), forward);
  std::vector<std::vector<Array>> blocks(out_dims.size());
  for (size_t j = 0; j < out_dims.size(); ++j) {
    for (size_t k = 0; k < wrt.size(); ++k) {
      std::vector<int64_t> dims = out_dims[j];
      dims.insert(dims.end(), in_dims[k].begin(), in_dims[k].end());
      const Array block = slice(jac, Shape{DimExpr(out_offsets[j]), DimExpr(in_offsets[k])},
                                Shape{DimExpr(out_offsets[j + 1]), DimExpr(in_offsets[k + 1])});
      blocks[j].push_back(reshape(block, concrete_shape(dims)));
    }
  }
  return blocks;
}

Tree tree_of(const TreeDef& def, std::span<const Array> leaves, size_t& at) {
  switch (def.kind()) {
    case TreeDef::Kind::kLeaf: return Tree(leaves[at++]);
    case TreeDef::Kind::kDict: {
      Tree::Dict dict;
      for (size_t i = 0; i < def.children().size(); ++i) dict.emplace(def.keys()[i], tree_of(def.children()[i], leaves, at));
      return Tree(std::move(dict));
    }
    case TreeDef::Kind::kCustom: {
      Tree::Custom custom{def.custom_name(), def.aux(), {}};
      for (const TreeDef& c : def.children()) custom.children.push_back(tree_of(c, leaves, at));
      return Tree(std::move(custom));
    }
    default: {
      Tree::List list;
      for (const TreeDef& c : def.children()) list.push_back(tree_of(c, leaves, at));
      return Tree(std::move(list));
    }
  }
}

}  // namespace mcx::detail
