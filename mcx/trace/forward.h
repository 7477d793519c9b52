// Forward-mode differentiation and Jacobians of C++ functions: jvp, linearize, jacfwd, jacrev, hessian.
//
//   auto f = [](const mcx::Array& x) { return mcx::sin(x) * x; };
//   auto [y, y_dot] = mcx::jvp(f, std::tuple{x}, std::tuple{x_dot});  // f(x) and J(x) x_dot, one pass
//   auto [y2, f_lin] = mcx::linearize(f, x);                           // primal once ...
//   mcx::Array y_dot2 = f_lin(x_dot);                                  // ... then J x_dot per call
//   mcx::Array J = mcx::jacfwd(f)(x);     // shape f(x).shape + x.shape, JVPs of every basis vector
//   mcx::Array J2 = mcx::jacrev(f)(x);    // same values, VJPs of every output basis vector
//   mcx::Array H = mcx::hessian(loss)(x); // jacfwd(jacrev(loss)): shape x.shape + x.shape
//
// As jax.jvp / jax.linearize / jax.jacfwd / jax.jacrev / jax.hessian. Each traces f to a Program and
// transforms it (ir/forward.h, ir/autodiff.h); the result composes with jit, grad and itself, and under
// jit the whole computation is one program. Derivative conventions are reverse mode's (autodiff.h: ties of
// max/min split evenly, abs'(0) = 0, ...): the forward rules are derived from the same VJP rules.
//
// Jacobians take one argument (argnums<I>, default 0), which must be an Array, and a function returning an
// Array. jacfwd evaluates the linearized function on every standard basis vector of the input at once
// (the linear program batched by vmap over an identity); jacrev does the same with the pullback over the
// output's basis. So jacfwd costs one linear pass over n inputs, jacrev one over m outputs, and as in JAX
// jacfwd suits few inputs and jacrev few outputs. The basis is materialised (n x n or m x m elements).
//
// Errors (mcx::InvalidArgument): "[jvp] tangent 0 must have its primal's type f32[3]; found f32[4]";
// "[jvp] the tangents' structure tuple(*) differs from the primals' tuple(*, *)"; non-floating primals
// ("differentiation needs floating inputs", as grad); "[jacfwd] the function's output has dtype int32; a
// Jacobian needs a floating output"; symbolic shapes in a Jacobian's input or output.
//
// Thread-safety: the returned function objects are immutable and may be called from any thread.
#pragma once

#include <functional>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mcx/ir/program.h"
#include "mcx/runtime/mesh.h"
#include "mcx/trace/array.h"
#include "mcx/trace/grad.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

namespace detail {

using LeafBody = std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>;

// f's outputs followed by their tangents (one per output leaf), for the given tangents (one per primal
// leaf, each of its primal's type). out_tree receives the outputs' structure.
std::vector<Array> jvp_leaves(const std::string& name, const FlatArgs& primals, const std::vector<Array>& tangents,
                              const LeafBody& body, TreeDef& out_tree);

// linearize: the outputs, and the linear part with its residuals.
struct LinearState {
  ir::Program linear;               // (residuals..., tangents...) -> (output tangents...)
  std::vector<Array> residuals;
  std::vector<AbstractValue> in_avals;
  TreeDef out_tree;
  std::optional<Mesh> mesh;  // the mesh the function runs on (TracedFunction::mesh)
};
std::pair<std::vector<Array>, std::shared_ptr<const LinearState>> linearize_leaves(const std::string& name,
                                                                                   const FlatArgs& primals,
                                                                                   const LeafBody& body);
// Tangents (one per input leaf, same types) -> output tangents.
std::vector<Array> linear_apply(const LinearState& state, const std::vector<Array>& tangents, const char* api);

// InvalidArgument unless tangents has primals' structure and leaf types.
void check_tangents(const char* api, const FlatArgs& primals, const TreeDef& tangent_tree,
                    const std::vector<Array>& tangents);

// d g / d x at x, shaped g(x).shape + x.shape: by linearize and the linear part batched over x's standard
// basis (forward), or by vjp and the pullback batched over g(x)'s basis (reverse). `api` names the caller.
Array jacobian(const char* api, const std::string& name, const std::function<Array(const Array&)>& g,
               const Array& x, bool forward);

// The Jacobian blocks of g: (wrt leaves) -> (output leaves) at `wrt`: blocks[j][k] = d out_j / d wrt_k, shaped
// out_j.shape + wrt_k.shape, computed as one Jacobian of the raveled, concatenated leaves (jacobian above).
// The wrt leaves must share one floating dtype and so must the outputs (InvalidArgument naming the leaf).
std::vector<std::vector<Array>> jacobian_blocks(const char* api, const std::string& name,
                                                const std::function<std::vector<Array>(std::span<const Array>)>& g,
                                                const std::vector<Array>& wrt, bool forward);
// A Tree shaped like def (tuples become lists) holding leaves[*at...] in order.
Tree tree_of(const TreeDef& def, std::span<const Array> leaves, size_t& at);

// Calls f(args...) with argument I replaced by x.
template <int I, typename F, typename... Args>
Array call_replacing(const F& f, const Array& x, const Args&... args) {
  auto all = std::forward_as_tuple(args...);
  return [&]<size_t... K>(std::index_sequence<K...>) -> Array {
    auto pick = [&]<size_t J>(std::integral_constant<size_t, J>) -> decltype(auto) {
      if constexpr (J == static_cast<size_t>(I)) {
        return static_cast<const Array&>(x);
      } else {
        return static_cast<const std::tuple_element_t<J, std::tuple<Args...>>&>(std::get<J>(all));
      }
    };
    return f(pick(std::integral_constant<size_t, K>{})...);
  }(std::index_sequence_for<Args...>{});
}

template <typename F, bool kForward, int... I>
class JacobianFn {
 public:
  JacobianFn(F f, std::string name) : f_(std::move(f)), name_(std::move(name)) {}

  // One Array argument and an Array result: the Jacobian as one Array. Otherwise (pytrees, several argnums)
  // a Tree: the output's structure, each output leaf holding the Jacobian blocks in the argument's
  // structure (several argnums: a list with one entry per argnum), as jax.jacrev nests them.
  template <typename... Args>
  auto operator()(const Args&... args) const {
    static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...), "mcx::jacfwd/jacrev: argnum out of range");
    const char* api = kForward ? "jacfwd" : "jacrev";
    if constexpr (sizeof...(I) == 1 && std::is_same_v<std::decay_t<decltype(f_(args...))>, Array> &&
                  (std::is_same_v<std::tuple_element_t<static_cast<size_t>(I), std::tuple<Args...>>, Array> && ...)) {
      constexpr int kI = (I + ...);
      const Array& x = std::get<static_cast<size_t>(kI)>(std::forward_as_tuple(args...));
      return jacobian(api, name_, [&](const Array& xi) { return call_replacing<kI>(f_, xi, args...); }, x, kForward);
    } else {
      FlatArgs flat = flatten_args(args...);
      std::vector<size_t> wrt;
      for (int a : {I...})
        for (size_t l = flat.ranges[a].first; l < flat.ranges[a].second; ++l) wrt.push_back(l);
      std::vector<Array> wrt_leaves;
      for (size_t l : wrt) wrt_leaves.push_back(flat.leaves[l]);
      TreeDef out_def;
      auto g = [&](std::span<const Array> xs) {
        std::vector<Array> leaves = flat.leaves;
        for (size_t k = 0; k < wrt.size(); ++k) leaves[wrt[k]] = xs[k];
        auto [outs, def] = tree_flatten(call_rebuilt(f_, flat, leaves, args...));
        out_def = std::move(def);
        return outs;
      };
      const std::vector<std::vector<Array>> blocks = jacobian_blocks(api, name_, g, wrt_leaves, kForward);
      std::vector<TreeDef> arg_defs;
      for (int a : {I...}) arg_defs.push_back(flat.defs[a]);
      const TreeDef inner = arg_defs.size() == 1 ? arg_defs[0] : TreeDef::list(arg_defs);
      std::vector<Array> all;
      for (const auto& row : blocks) all.insert(all.end(), row.begin(), row.end());
      size_t at = 0;
      return tree_of(compose(out_def, inner), all, at);
    }
  }

 private:
  // outer with each leaf replaced by inner.
  static TreeDef compose(const TreeDef& outer, const TreeDef& inner) {
    if (outer.kind() == TreeDef::Kind::kLeaf) return inner;
    std::vector<TreeDef> children;
    for (const TreeDef& c : outer.children()) children.push_back(compose(c, inner));
    if (outer.kind() == TreeDef::Kind::kDict) return TreeDef::dict(outer.keys(), std::move(children));
    if (outer.kind() == TreeDef::Kind::kCustom) return TreeDef::custom(outer.custom_name(), outer.aux(), std::move(children));
    return TreeDef::list(std::move(children));
  }

  F f_;
  std::string name_;
};

}  // namespace detail

// jvp(f, primals, tangents) -> (f(primals...), J tangents). primals and tangents are tuples of the
// arguments (Arrays or pytrees of floating Arrays) with equal structure and leaf types; f may return any
// pytree, and the tangent has its structure.
template <typename F, typename... Args>
  requires(PyTree<Args> && ...)
auto jvp(const F& f, const std::tuple<Args...>& primals, const std::tuple<Args...>& tangents) {
  using R = detail::traced_result_t<F, Args...>;
  static_assert(PyTree<R>, "mcx::jvp: the function must return an Array or a pytree of Arrays");
  detail::FlatArgs flat = std::apply([](const auto&... p) { return detail::flatten_args(p...); }, primals);
  auto [tangent_leaves, tangent_tree] = tree_flatten(tangents);
  auto [primal_leaves, primal_tree] = tree_flatten(primals);
  if (tangent_tree != primal_tree) {
    throw InvalidArgument("[jvp] the tangents' structure " + tangent_tree.to_string() + " differs from the primals' " +
                          primal_tree.to_string());
  }
  TreeDef out_tree;
  std::vector<Array> res = detail::jvp_leaves(
      "function", flat, tangent_leaves,
      [&](std::span<const Array> tracers, TreeDef& tree) {
        auto [leaves, def] = tree_flatten(std::apply(
            [&](const auto&... p) { return detail::call_rebuilt(f, flat, tracers, p...); }, primals));
        tree = std::move(def);
        return leaves;
      },
      out_tree);
  const size_t n = res.size() / 2;
  R out = tree_unflatten<R>(out_tree, std::span<const Array>(res).subspan(0, n));
  R out_dot = tree_unflatten<R>(out_tree, std::span<const Array>(res).subspan(n));
  return std::pair<R, R>(std::move(out), std::move(out_dot));
}

// The linear function returned by linearize: tangents of the primals (same structure and types) -> the
// tangent of the outputs. Evaluates only the linear part, on the residuals saved by linearize.
template <typename Out, typename... Args>
class LinearizedFunction {
 public:
  LinearizedFunction(std::shared_ptr<const detail::LinearState> state, detail::FlatArgs flat)
      : state_(std::move(state)), flat_(std::move(flat)) {}

  Out operator()(const Args&... tangents) const {
    auto [leaves, def] = tree_flatten(std::tuple<Args...>(tangents...));
    detail::check_tangents("linearize", flat_, def, leaves);
    std::vector<Array> out = detail::linear_apply(*state_, leaves, "linearize");
    return tree_unflatten<Out>(state_->out_tree, out);
  }

 private:
  std::shared_ptr<const detail::LinearState> state_;
  detail::FlatArgs flat_;
};

// linearize(f, primals...) -> (f(primals...), f_jvp) where f_jvp(tangents...) = J tangents, as
// jax.linearize: the primal computation runs once here; each f_jvp call runs only the linear part.
template <typename F, typename... Args>
  requires(PyTree<Args> && ...)
auto linearize(const F& f, const Args&... primals) {
  using R = detail::traced_result_t<F, Args...>;
  static_assert(PyTree<R>, "mcx::linearize: the function must return an Array or a pytree of Arrays");
  detail::FlatArgs flat = detail::flatten_args(primals...);
  auto [outs, state] = detail::linearize_leaves("function", flat, [&](std::span<const Array> tracers, TreeDef& tree) {
    auto [leaves, def] = tree_flatten(detail::call_rebuilt(f, flat, tracers, primals...));
    tree = std::move(def);
    return leaves;
  });
  R out = tree_unflatten<R>(state->out_tree, outs);
  return std::pair<R, LinearizedFunction<R, Args...>>(std::move(out),
                                                      LinearizedFunction<R, Args...>(state, std::move(flat)));
}

struct JacobianOptions {
  std::string name = "function";  // used in error messages
};

// jacfwd(f, argnums<I>)(args...): the Jacobian of f with respect to argument I, by forward mode. An Array
// argument and an Array result give one Array shaped f(args).shape + args[I].shape. Pytree arguments or
// results, or several argnums (argnums<0, 2>), give a Tree: f's output structure whose every leaf holds the
// blocks d out / d arg-leaf (shaped out.shape + leaf.shape) in the argument's structure, or a list of those
// per argnum (tuples become lists), as jax.jacfwd nests them.
template <typename F>
auto jacfwd(F&& f, JacobianOptions options = {}) {
  return detail::JacobianFn<std::decay_t<F>, true, 0>(std::forward<F>(f), std::move(options.name));
}
template <typename F, int... I>
auto jacfwd(F&& f, Argnums<I...>, JacobianOptions options = {}) {
  return detail::JacobianFn<std::decay_t<F>, true, I...>(std::forward<F>(f), std::move(options.name));
}
// jacrev(f, argnums<I...>)(args...): the same Jacobian by reverse mode.
template <typename F>
auto jacrev(F&& f, JacobianOptions options = {}) {
  return detail::JacobianFn<std::decay_t<F>, false, 0>(std::forward<F>(f), std::move(options.name));
}
template <typename F, int... I>
auto jacrev(F&& f, Argnums<I...>, JacobianOptions options = {}) {
  return detail::JacobianFn<std::decay_t<F>, false, I...>(std::forward<F>(f), std::move(options.name));
}
// hessian(f, argnums<I>)(args...) = jacfwd(jacrev(f)): for a scalar f, shaped args[I].shape twice.
template <typename F>
auto hessian(F&& f, JacobianOptions options = {}) {
  return jacfwd(jacrev(std::forward<F>(f), options), options);
}
template <typename F, int I>
auto hessian(F&& f, Argnums<I> a, JacobianOptions options = {}) {
  return jacfwd(jacrev(std::forward<F>(f), a, options), a, options);
}

}  // namespace mcx
