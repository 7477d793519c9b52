// Rematerialisation, as jax.checkpoint / jax.remat: differentiate a function without keeping its
// intermediate values alive from the forward to the backward pass; they are recomputed there instead.
//
//   auto block = mcx::remat([](const mcx::Array& h, const mcx::Array& w) { return h + mcx::tanh(mcx::matmul(h, w)); });
//   auto loss = [&](const std::vector<mcx::Array>& ws, const mcx::Array& x) {
//     mcx::Array h = x;
//     for (const mcx::Array& w : ws) h = block(h, w);
//     return mcx::mean(mcx::square(h));
//   };
//   auto grads = mcx::jit(mcx::grad(loss))(ws, x);   // each block's tanh recomputed in the backward pass
//
// Under grad, vjp and value_and_grad (at any nesting, with or without jit), the values f computes from its
// array arguments are recomputed in the backward pass from those arguments, just before they are needed;
// f's results are kept (ir/remat.h has the exact rule). Gradients are the same bit for bit (second
// derivatives to rounding: a value's and its copy's cotangents are summed apart); what changes is peak
// memory (a network of L checkpointed blocks keeps its L block inputs instead of every intermediate) and
// compute (f's forward runs twice). Arrays f closes over instead of taking as arguments are kept, as are
// values computed from them alone. Outside any trace remat(f) simply calls f; under jit alone the markers
// cost nothing (the CPU backend aliases them). The markers are IR ops (remat_barrier, opset 6), so a
// program exported with them keeps its rematerialisation when it is differentiated after loading.
//
// Not the namespace mcx::checkpoint (sharded checkpoints of array state on disk), hence the name remat.
// JAX's save policies (e.g. keeping matmul results) are not offered: every value is recomputed.
//
// Thread-safety: the returned function object is immutable and may be called from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "mcx/trace/array.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {
namespace detail {

// A fresh region id in the innermost trace (InvalidArgument outside a trace).
int64_t new_remat_region();
// leaves, each marked as an input (role 0) or output (role 1) of region.
std::vector<Array> remat_mark(std::span<const Array> leaves, int64_t region, int64_t role);

template <typename F>
class RematFn {
 public:
  explicit RematFn(F f) : f_(std::move(f)) {}

  template <typename... Args>
    requires(CallArg<Args> && ...)
  auto operator()(const Args&... args) const {
    using R = traced_result_t<F, Args...>;
    static_assert(PyTree<R>, "mcx::remat: the function must return an Array or a pytree of Arrays");
    FlatArgs flat = flatten_args(args...);
    if (!in_trace()) return R(call_rebuilt(f_, flat, flat.leaves, args...));
    const int64_t region = new_remat_region();
    std::vector<Array> inputs = remat_mark(flat.leaves, region, 0);
    auto [leaves, def] = tree_flatten(call_rebuilt(f_, flat, inputs, args...));
    return tree_unflatten<R>(def, remat_mark(leaves, region, 1));
  }

 private:
  F f_;
};

}  // namespace detail

template <typename F>
auto remat(F&& f) {
  return detail::RematFn<std::decay_t<F>>(std::forward<F>(f));
}

}  // namespace mcx
