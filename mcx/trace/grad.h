// Reverse-mode differentiation of C++ functions: grad, value_and_grad, vjp.
//
//   auto loss = [](const mcx::Tree& params, const mcx::Array& x) { ... return scalar; };
//   mcx::Tree g = mcx::grad(loss)(params, x);                            // d loss / d params
//   auto [l, gs] = mcx::value_and_grad(loss, mcx::argnums<0, 1>)(params, x);  // gs: tuple(Tree, Array)
//   auto step = mcx::jit(mcx::value_and_grad(loss));                      // one compiled program
//
// Each call traces f to a Program, transforms it with ir::value_and_grad_program / ir::vjp_program and
// evaluates the transformed program through call_program (dispatch.h): eagerly (compiled, cached by
// program structure) at top level, or recorded into the enclosing trace, so jit(grad(f)), grad(grad(f))
// and grad inside jit all produce programs. Argnums are compile-time (mcx::argnums<0, 2>) because the
// gradient of argument i has argument i's type: an Array, or a pytree of the same structure.
//
// Errors (mcx::InvalidArgument): "[grad] function must return a scalar floating array; found f32[3]";
// "[grad] argument 1 has dtype i32; differentiation needs floating inputs"; argnums out of range is a
// compile-time error. Static arguments (numbers, enums, strings) may be passed but not differentiated.
//
// Thread-safety: the returned function objects are stateless and may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
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
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

template <int... I>
struct Argnums {};
template <int... I>
inline constexpr Argnums<I...> argnums{};

struct GradOptions {
  std::string name = "function";  // used in error messages ("traced in grad of 'loss'")
};

namespace detail {

// InvalidArgument naming the argument and leaf unless every leaf in wrt is floating ("[api] argument 1
// (leaf 2, i32[3]) has dtype int32; differentiation needs floating inputs ...").
void check_floating_inputs(const char* api, const FlatArgs& flat, const std::vector<size_t>& wrt);
// The arguments of a traced program: the leaves, then the enclosing tracers the function captured.
std::vector<Array> with_captured(const FlatArgs& flat, const TracedFunction& traced);

// Traces body (flat leaves -> flat outputs) and returns {value, d value / d leaves[wrt[0]], ...}.
// `api` is "grad" or "value_and_grad" for error messages.
std::vector<Array> value_and_grad_leaves(
    const char* api, const std::string& name, const FlatArgs& flat, const std::vector<size_t>& wrt,
    const std::function<std::vector<Array>(std::span<const Array>)>& body);

// vjp: the forward outputs and what is needed to pull cotangents back.
struct VjpState {
  ir::Program vjp;            // (leaves..., captured..., cts...) -> (outs..., grads of leaves...)
  std::vector<Array> args;    // leaves then captured tracers
  std::vector<AbstractValue> out_avals;
  TreeDef out_tree;
  size_t num_leaves = 0;
  std::optional<Mesh> mesh;   // the mesh the function runs on (TracedFunction::mesh)
};
std::pair<std::vector<Array>, std::shared_ptr<const VjpState>> vjp_leaves(
    const std::string& name, const FlatArgs& flat,
    const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& body);
// Cotangents (one per output leaf, same types) -> gradients (one per input leaf).
std::vector<Array> vjp_apply(const VjpState& state, const std::vector<Array>& cotangents);

template <int N, typename... Args>
using arg_at_t = traced_arg_t<std::tuple_element_t<static_cast<size_t>(N), std::tuple<Args...>>>;

template <typename Tuple, int... I>
struct GradType;
template <typename... Args, int I0>
struct GradType<std::tuple<Args...>, I0> {
  using type = arg_at_t<I0, Args...>;
};
template <typename... Args, int I0, int I1, int... Is>
struct GradType<std::tuple<Args...>, I0, I1, Is...> {
  using type = std::tuple<arg_at_t<I0, Args...>, arg_at_t<I1, Args...>, arg_at_t<Is, Args...>...>;
};

// Splits the flat gradients of the leaves of arguments I... back into their argument types.
template <typename G, int... I, typename... Args>
G unflatten_grads(const FlatArgs& flat, std::span<const Array> grads, std::type_identity<std::tuple<Args...>>) {
  constexpr size_t n = sizeof...(I);
  std::array<int, n> idx{I...};
  std::array<size_t, n + 1> offsets{};
  for (size_t k = 0; k < n; ++k) {
    auto [b, e] = flat.ranges[idx[k]];
    offsets[k + 1] = offsets[k] + (e - b);
  }
  auto one = [&]<int J, size_t K>() {
    using T = arg_at_t<J, Args...>;
    return tree_unflatten<T>(flat.defs[J], grads.subspan(offsets[K], offsets[K + 1] - offsets[K]));
  };
  if constexpr (n == 1) {
    return one.template operator()<I..., 0>();
  } else {
    return [&]<size_t... K>(std::index_sequence<K...>) {
      constexpr std::array<int, n> js{I...};
      return G{one.template operator()<js[K], K>()...};
    }(std::make_index_sequence<n>{});
  }
}

template <typename F, bool kWithValue, int... I>
class GradFn {
 public:
  GradFn(F f, GradOptions options) : f_(std::move(f)), options_(std::move(options)) {}

  template <typename... Args>
    requires(CallArg<Args> && ...)
  auto operator()(const Args&... args) const {
    static_assert(sizeof...(I) >= 1, "mcx::grad: argnums must not be empty");
    static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...),
                  "mcx::grad: an argnum is out of range for the arguments passed");
    static_assert((PyTree<arg_at_t<I, Args...>> && ...),
                  "mcx::grad: differentiated arguments must be Arrays or pytrees of Arrays");
    using R = traced_result_t<F, Args...>;
    static_assert(std::is_same_v<R, Array>, "mcx::grad: the function must return an Array (a scalar)");
    using G = typename GradType<std::tuple<Args...>, I...>::type;

    FlatArgs flat = flatten_args(args...);
    std::vector<size_t> wrt;
    for (int a : {I...}) {
      for (size_t l = flat.ranges[a].first; l < flat.ranges[a].second; ++l) wrt.push_back(l);
    }
    std::vector<Array> res = value_and_grad_leaves(
        kWithValue ? "value_and_grad" : "grad", options_.name, flat, wrt,
        [&](std::span<const Array> tracers) { return std::vector<Array>{call_rebuilt(f_, flat, tracers, args...)}; });
    G grads = unflatten_grads<G, I...>(flat, std::span<const Array>(res).subspan(1),
                                      std::type_identity<std::tuple<Args...>>{});
    if constexpr (kWithValue) {
      return std::pair<Array, G>(res[0], std::move(grads));
    } else {
      return grads;
    }
  }

 private:
  F f_;
  GradOptions options_;
};

}  // namespace detail

// grad(f): d f / d (argument 0). grad(f, argnums<i, j>): a tuple of gradients for arguments i and j.
template <typename F>
auto grad(F&& f, GradOptions options = {}) {
  return detail::GradFn<std::decay_t<F>, false, 0>(std::forward<F>(f), std::move(options));
}
template <typename F, int... I>
auto grad(F&& f, Argnums<I...>, GradOptions options = {}) {
  return detail::GradFn<std::decay_t<F>, false, I...>(std::forward<F>(f), std::move(options));
}
// value_and_grad(f, argnums): (f(args), gradients) as std::pair, computed by one program.
template <typename F>
auto value_and_grad(F&& f, GradOptions options = {}) {
  return detail::GradFn<std::decay_t<F>, true, 0>(std::forward<F>(f), std::move(options));
}
template <typename F, int... I>
auto value_and_grad(F&& f, Argnums<I...>, GradOptions options = {}) {
  return detail::GradFn<std::decay_t<F>, true, I...>(std::forward<F>(f), std::move(options));
}

// The pullback returned by vjp: maps a cotangent with the outputs' structure and types to the gradients
// of all primals (one primal: its type; several: a tuple).
template <typename Out, typename... Args>
class VjpFunction {
 public:
  using Grads = std::conditional_t<sizeof...(Args) == 1, detail::arg_at_t<0, Args...>,
                                   std::tuple<detail::traced_arg_t<Args>...>>;
  VjpFunction(std::shared_ptr<const detail::VjpState> state, detail::FlatArgs flat)
      : state_(std::move(state)), flat_(std::move(flat)) {}

  // InvalidArgument when the cotangent's structure or leaf types differ from the outputs'.
  Grads operator()(const Out& cotangent) const {
    auto [cts, def] = tree_flatten(cotangent);
    if (def != state_->out_tree) {
      throw InvalidArgument("[vjp] cotangent structure " + def.to_string() + " differs from the outputs' " +
                            state_->out_tree.to_string());
    }
    std::vector<Array> g = detail::vjp_apply(*state_, cts);
    return [&]<int... I>(std::integer_sequence<int, I...>) {
      return detail::unflatten_grads<Grads, I...>(flat_, g, std::type_identity<std::tuple<Args...>>{});
    }(std::make_integer_sequence<int, sizeof...(Args)>{});
  }

 private:
  std::shared_ptr<const detail::VjpState> state_;
  detail::FlatArgs flat_;
};

// vjp(f, primals...) -> (f(primals...), pullback). All primals must be Arrays or pytrees of floating
// Arrays; the outputs may be any pytree.
template <typename F, typename... Args>
  requires(PyTree<Args> && ...)
auto vjp(const F& f, const Args&... primals) {
  using R = detail::traced_result_t<F, Args...>;
  static_assert(PyTree<R>, "mcx::vjp: the function must return an Array or a pytree of Arrays");
  detail::FlatArgs flat = detail::flatten_args(primals...);
  auto [outs, state] = detail::vjp_leaves(
      "function", flat, [&](std::span<const Array> tracers, TreeDef& out_tree) {
        auto [leaves, def] = tree_flatten(detail::call_rebuilt(f, flat, tracers, primals...));
        out_tree = std::move(def);
        return leaves;
      });
  R out = tree_unflatten<R>(state->out_tree, outs);
  return std::pair<R, VjpFunction<R, Args...>>(std::move(out), VjpFunction<R, Args...>(state, std::move(flat)));
}

}  // namespace mcx
