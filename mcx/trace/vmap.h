// Vectorising map of C++ functions, as jax.vmap.
//
//   auto predict = [](const mcx::Tree& params, const mcx::Array& image) { ... };   // one example
//   mcx::Array logits = mcx::vmap(predict, {.in_axes = {std::nullopt, 0}})(params, images);
//   auto per_example_grads = mcx::vmap(mcx::grad(loss), {.in_axes = {std::nullopt, 0, 0}})(params, xs, ys);
//
// f is traced once on one example (mapped arguments without their mapped axis) and the program is batched
// by ir::vmap_program (batching.h), so the whole batch runs as one program; vmap composes with jit, grad,
// jvp and itself. in_axes has one entry per argument: the axis of that argument's arrays (every leaf of a
// pytree argument) to map over, or std::nullopt for an argument all examples share. Empty in_axes maps
// axis 0 of every array or pytree argument; static arguments (numbers, strings) are never mapped. The
// batch axis is placed at out_axes in every output leaf. Negative axes count from the end.
//
// Errors (mcx::InvalidArgument, named as JAX's): "[vmap] in_axes has 1 entries for 2 arguments";
// "[vmap] argument 0 (leaf 0, f32[3]) cannot be mapped over axis 1: its rank is 1"; "[vmap] mapped axes
// have different sizes: argument 0 (leaf 0) has 3 along axis 0, argument 1 (leaf 1) has 4 along axis 0";
// "[vmap] no argument is mapped ..."; "[vmap] argument 2 is a static value; its in_axes entry must be
// std::nullopt"; out_axes outside an output's rank. mcx::Unimplemented when an op that has to be
// unrolled (batching.h) meets a symbolic batch size.
//
// Thread-safety: the returned function object is immutable and may be called from any thread.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

struct VmapOptions {
  std::vector<std::optional<int>> in_axes = {};  // one per argument; empty: axis 0 of every array argument
  int out_axes = 0;
  std::string name = "function";  // used in error messages ("traced in vmap of 'predict'")
};

namespace detail {

// Batches body (one example's leaves -> output leaves) over the leaves' mapped axes (leaf_axes: one per
// leaf, std::nullopt for shared leaves; `arg_of` names each leaf's argument in errors) and returns the
// outputs with the batch axis at out_axes. out_tree receives the outputs' structure.
std::vector<Array> vmap_leaves(const std::string& name, const FlatArgs& flat,
                               const std::vector<std::optional<int>>& leaf_axes, int out_axes,
                               const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& body,
                               TreeDef& out_tree);

// The per-leaf axes from the per-argument in_axes (InvalidArgument for a count mismatch or a mapped
// static argument).
std::vector<std::optional<int>> leaf_axes_of(const FlatArgs& flat, const std::vector<std::optional<int>>& in_axes,
                                             const std::vector<bool>& arg_is_static);

template <typename F>
class VmapFn {
 public:
  VmapFn(F f, VmapOptions options) : f_(std::move(f)), options_(std::move(options)) {}

  template <typename... Args>
    requires(CallArg<Args> && ...)
  auto operator()(const Args&... args) const {
    using R = traced_result_t<F, Args...>;
    static_assert(PyTree<R>, "mcx::vmap: the function must return an Array or a pytree of Arrays");
    FlatArgs flat = flatten_args(args...);
    const std::vector<bool> arg_is_static{StaticArg<Args>...};
    std::vector<std::optional<int>> axes = leaf_axes_of(flat, options_.in_axes, arg_is_static);
    TreeDef out_tree;
    std::vector<Array> outs = vmap_leaves(
        options_.name, flat, axes, options_.out_axes,
        [&](std::span<const Array> tracers, TreeDef& tree) {
          auto [leaves, def] = tree_flatten(call_rebuilt(f_, flat, tracers, args...));
          tree = std::move(def);
          return leaves;
        },
        out_tree);
    return tree_unflatten<R>(out_tree, outs);
  }

 private:
  F f_;
  VmapOptions options_;
};

}  // namespace detail

template <typename F>
auto vmap(F&& f, VmapOptions options = {}) {
  return detail::VmapFn<std::decay_t<F>>(std::forward<F>(f), std::move(options));
}

}  // namespace mcx
