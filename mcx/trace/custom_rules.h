// Custom differentiation rules, as jax.custom_vjp and jax.custom_jvp: a function whose derivative is given
// by the user (numerical stability, a cheaper backward pass, gradient clipping, straight-through
// estimators).
//
//   // log(1 + exp(x)) with a stable gradient (sigmoid) computed from a saved residual:
//   auto softplus = mcx::custom_vjp(
//       [](const mcx::Array& x) { return mcx::log1p(mcx::exp(x)); },                       // fun
//       [](const mcx::Array& x) { return std::pair{mcx::log1p(mcx::exp(x)), x}; },        // fwd: (out, residuals)
//       [](const mcx::Array& x, const mcx::Array& g) { return g * mcx::sigmoid(x); });    // bwd(residuals, ct)
//
//   // the same with a JVP rule, which serves forward and reverse mode:
//   auto softplus2 = mcx::custom_jvp(
//       [](const mcx::Array& x) { return mcx::log1p(mcx::exp(x)); },
//       [](const std::tuple<mcx::Array>& primals, const std::tuple<mcx::Array>& tangents) {
//         const mcx::Array& x = std::get<0>(primals);
//         return std::pair{mcx::log1p(mcx::exp(x)), std::get<0>(tangents) * mcx::sigmoid(x)};
//       });
//
// custom_vjp(fun, fwd, bwd): fun(args...) -> out; fwd(args...) -> std::pair(out, residuals) with out of
// fun's structure and types and residuals any pytree; bwd(residuals, out cotangent) -> the cotangents of
// the args: a std::tuple with one pytree per argument of that argument's structure and types (with one
// argument, that pytree alone is accepted too). Reverse mode (grad, vjp) runs fwd then bwd; forward mode
// (jvp, jacfwd) raises Unimplemented, as JAX.
// custom_jvp(fun, jvp): jvp(primals, tangents) -> std::pair(out, out tangent), primals and tangents each a
// std::tuple of the args (tangents of the args' types; zeros for arguments not differentiated). jvp must be
// linear in the tangents: reverse mode transposes it. Both modes use it.
//
// Arguments and results are pytrees (pytree.h). Outside any trace the call is fun(args...); inside jit,
// grad, vmap, shard_map or export the functions are traced once per call site into one op
// (custom_vjp_call / custom_jvp_call, opset 8) that carries the rule, so the rule survives jit, composes
// with vmap (the rule is vmapped too) and is part of exported artifacts; when the program runs, fun runs
// (inlined: the rule costs nothing until differentiation). Arrays the functions close over must not be
// differentiated (InvalidArgument naming the function; pass them as arguments): the rule gives no
// derivative for them.
// Errors (InvalidArgument, "[custom_vjp] ..."): fwd's output differs from fun's in structure or types, bwd
// returns the wrong number, structure or types of cotangents (naming the argument leaf), jvp's output or
// tangent differs from fun's.
// Thread-safety: as tracing: each call stages into the calling thread's innermost trace.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mcx/trace/array.h"
#include "mcx/trace/control_flow.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/pytree.h"

namespace mcx {
namespace detail {

// The custom_vjp_call op on flat leaves: operands are args, then the regions' captured arrays. Returns
// fun's output leaves.
std::vector<Array> custom_vjp_flat(const std::vector<Array>& args, const TracedRegion& fun, const TracedRegion& fwd,
                                   const TracedRegion& bwd);
std::vector<Array> custom_jvp_flat(const std::vector<Array>& args, const TracedRegion& fun, const TracedRegion& jvp);

// The bwd or jvp result `found` checked against the arguments' structure `args_def` (a tuple of one tree
// per argument; with one argument, that tree alone is accepted).
void check_per_argument_structure(const char* api, const char* role, const char* what, const TreeDef& found,
                                  const TreeDef& args_def);

// Traces fun on the args' types: the region and the output structure.
template <typename Fun, typename Tuple>
std::pair<TracedRegion, TreeDef> trace_custom_fun(const char* api, const Fun& fun, const TreeDef& def,
                                                  const std::vector<Array>& leaves) {
  TreeDef out_def;
  TracedRegion r = trace_region(api, "fun", avals_of(leaves), weak_of(leaves), [&](std::span<const Array> in) {
    auto [out, d] = tree_flatten(std::apply(fun, tree_unflatten<Tuple>(def, in)));
    out_def = d;
    return out;
  });
  return {std::move(r), std::move(out_def)};
}

// The leaves of `out` after checking them against fun's output (structure and types).
template <typename T>
std::vector<Array> checked_like_fun(const char* api, const char* role, const char* what, const T& out,
                                    const TreeDef& fun_def, const TracedRegion& fun) {
  auto [leaves, d] = tree_flatten(out);
  check_same_structure(api, role, what, d, fun_def);
  check_leaf_types(api, role, what, "fun", fun_def, avals_of(leaves), fun.program.result_types());
  return leaves;
}

}  // namespace detail

template <typename Fun, typename Fwd, typename Bwd>
class CustomVjp {
 public:
  CustomVjp(Fun fun, Fwd fwd, Bwd bwd) : fun_(std::move(fun)), fwd_(std::move(fwd)), bwd_(std::move(bwd)) {}

  template <PyTree... Args>
  auto operator()(const Args&... args) const {
    using R = std::remove_cvref_t<std::invoke_result_t<const Fun&, const Args&...>>;
    static_assert(PyTree<R>, "mcx::custom_vjp: fun must return a pytree of Arrays");
    if (!in_trace()) return R(fun_(args...));
    using Tuple = std::tuple<Args...>;
    using FwdResult = std::remove_cvref_t<std::invoke_result_t<const Fwd&, const Args&...>>;
    using Res = std::remove_cvref_t<typename FwdResult::second_type>;
    static_assert(PyTree<Res>, "mcx::custom_vjp: fwd must return std::pair<output, residuals> with pytrees");
    constexpr const char* api = "custom_vjp";
    auto [leaves, def] = tree_flatten(Tuple(args...));
    auto [fun, out_def] = detail::trace_custom_fun<Fun, Tuple>(api, fun_, def, leaves);
    TreeDef res_def;
    detail::TracedRegion fwd = detail::trace_region(
        api, "fwd", detail::avals_of(leaves), detail::weak_of(leaves), [&](std::span<const Array> in) {
          FwdResult r = std::apply(fwd_, tree_unflatten<Tuple>(def, in));
          std::vector<Array> out = detail::checked_like_fun(api, "fwd", "output", R(r.first), out_def, fun);
          auto [res, d] = tree_flatten(r.second);
          res_def = d;
          out.insert(out.end(), res.begin(), res.end());
          return out;
        });
    const std::vector<AbstractValue> fwd_types = fwd.program.result_types();
    const size_t m = fun.program.results.size();
    std::vector<AbstractValue> bwd_types(fwd_types.begin() + static_cast<std::ptrdiff_t>(m), fwd_types.end());
    const size_t r = bwd_types.size();
    for (const AbstractValue& t : fun.program.result_types()) bwd_types.push_back(t);
    detail::TracedRegion bwd = detail::trace_region(
        api, "bwd", bwd_types, std::vector<bool>(bwd_types.size(), false), [&](std::span<const Array> in) {
          auto [cts, d] = tree_flatten(bwd_(tree_unflatten<Res>(res_def, in.subspan(0, r)),
                                            tree_unflatten<R>(out_def, in.subspan(r))));
          detail::check_per_argument_structure(api, "bwd", "cotangents", d, def);
          detail::check_leaf_types(api, "bwd", "cotangent", "the argument", def, detail::avals_of(cts),
                                   detail::avals_of(leaves));
          return cts;
        });
    return tree_unflatten<R>(out_def, detail::custom_vjp_flat(leaves, fun, fwd, bwd));
  }

 private:
  Fun fun_;
  Fwd fwd_;
  Bwd bwd_;
};

template <typename Fun, typename Jvp>
class CustomJvp {
 public:
  CustomJvp(Fun fun, Jvp jvp) : fun_(std::move(fun)), jvp_(std::move(jvp)) {}

  template <PyTree... Args>
  auto operator()(const Args&... args) const {
    using R = std::remove_cvref_t<std::invoke_result_t<const Fun&, const Args&...>>;
    static_assert(PyTree<R>, "mcx::custom_jvp: fun must return a pytree of Arrays");
    if (!in_trace()) return R(fun_(args...));
    using Tuple = std::tuple<Args...>;
    constexpr const char* api = "custom_jvp";
    auto [leaves, def] = tree_flatten(Tuple(args...));
    auto [fun, out_def] = detail::trace_custom_fun<Fun, Tuple>(api, fun_, def, leaves);
    const std::vector<AbstractValue> arg_types = detail::avals_of(leaves);
    const std::vector<bool> arg_weak = detail::weak_of(leaves);
    const size_t n = arg_types.size();
    std::vector<AbstractValue> types = arg_types;  // the primals, then their tangents
    types.insert(types.end(), arg_types.begin(), arg_types.end());
    std::vector<bool> weak = arg_weak;
    weak.insert(weak.end(), arg_weak.begin(), arg_weak.end());
    detail::TracedRegion jvp = detail::trace_region(api, "jvp", types, weak, [&](std::span<const Array> in) {
      auto r = jvp_(tree_unflatten<Tuple>(def, in.subspan(0, n)), tree_unflatten<Tuple>(def, in.subspan(n)));
      std::vector<Array> out = detail::checked_like_fun(api, "jvp", "output", R(r.first), out_def, fun);
      std::vector<Array> tangents = detail::checked_like_fun(api, "jvp", "tangent", R(r.second), out_def, fun);
      out.insert(out.end(), tangents.begin(), tangents.end());
      return out;
    });
    return tree_unflatten<R>(out_def, detail::custom_jvp_flat(leaves, fun, jvp));
  }

 private:
  Fun fun_;
  Jvp jvp_;
};

// fun with the reverse-mode rule (fwd, bwd); see the top of this file.
template <typename Fun, typename Fwd, typename Bwd>
CustomVjp<Fun, Fwd, Bwd> custom_vjp(Fun fun, Fwd fwd, Bwd bwd) {
  return CustomVjp<Fun, Fwd, Bwd>(std::move(fun), std::move(fwd), std::move(bwd));
}

// fun with the forward-mode rule jvp (transposed for reverse mode); see the top of this file.
template <typename Fun, typename Jvp>
CustomJvp<Fun, Jvp> custom_jvp(Fun fun, Jvp jvp) {
  return CustomJvp<Fun, Jvp>(std::move(fun), std::move(jvp));
}

}  // namespace mcx
