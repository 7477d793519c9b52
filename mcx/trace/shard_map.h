// shard_map (jax.shard_map): write the per-device program yourself, with explicit collectives.
//
//   auto step = mcx::shard_map(
//       [](const mcx::Array& w, const mcx::Array& x) {            // local shards
//         mcx::Array local = mcx::sum(mcx::matmul(x, w));
//         return mcx::psum(local, "data");                         // sum over the "data" axis
//       },
//       mesh, {mcx::P(), mcx::P("data")}, {mcx::P()});
//   mcx::Array total = step(w, x);                                 // global arrays in and out
//
// in_specs: one PartitionSpec per top-level argument (it applies to every leaf of that argument's
// pytree). out_specs: one spec for every output leaf, or one per output leaf. The body sees each leaf's
// local shard (global dims divided by the shard counts; uneven: InvalidArgument) and returns local
// values; an output spec that does not name a mesh axis asserts the output is equal on every device
// along it (as JAX with check_rep=False: not checked; the shard of the first device is used).
// Arguments whose sharding differs from in_specs are moved (an implicit transfer for the transfer
// guard). The body is traced once per argument signature and compiled (cached, like jit).
//
// Collectives (valid only inside a shard_map body; elsewhere InvalidArgument "unbound axis name"):
// psum/pmax/pmin/pmean over one or several mesh axes, all_gather, psum_scatter, all_to_all, ppermute,
// axis_index. They are IR ops with VJP rules, so grad inside the body works (pmap convention: the
// gradient of each device's own output; average gradients with pmean for data parallelism).
//
// Inside jit, grad, vjp, jvp and vmap (JAX allows both orders): the body is staged as a shard_map op of
// the enclosing program, which then runs on this mesh (jit picks it even when no argument is sharded;
// arguments are resharded to in_specs inside the computation). Differentiating a shard_map gives the
// gradient of the global function: a result replicated over mesh axes (an out spec that does not name
// them) counts once, and an argument replicated over axes gets its per-device cotangents summed over them
// (ir/shard_map.h). Arrays the body closes over enter replicated. A shard_map called inside another
// shard_map's body is InvalidArgument (nesting is not supported). A loop, cond or custom rule whose
// function calls shard_map runs on its mesh, under jit or eagerly.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mcx/runtime/mesh.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/array.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

// Mesh axis names for collectives: "data" or {"x", "y"}.
struct AxisNames {
  std::vector<std::string> names;
  AxisNames(const char* name) : names{name} {}                    // NOLINT: implicit on purpose
  AxisNames(std::string name) : names{std::move(name)} {}         // NOLINT
  AxisNames(std::initializer_list<std::string> n) : names(n) {}   // NOLINT
};

Array psum(const Array& x, const AxisNames& axes);
Array pmax(const Array& x, const AxisNames& axes);
Array pmin(const Array& x, const AxisNames& axes);
Array pmean(const Array& x, const AxisNames& axes);
// Gathers the members' x along `axis`: tiled concatenates along an existing dimension, otherwise a new
// dimension of the group size is inserted at `axis` (jax.lax.all_gather).
Array all_gather(const Array& x, const AxisNames& axes, int axis = 0, bool tiled = false);
// Sums over the group and scatters along scatter_dimension: tiled divides that dimension by the group
// size; otherwise its size must equal the group size and it is removed (jax.lax.psum_scatter).
Array psum_scatter(const Array& x, const AxisNames& axes, int scatter_dimension = 0, bool tiled = false);
// jax.lax.all_to_all with tiled=True: split_axis is cut into group-size blocks, block j goes to member j,
// received blocks are concatenated along concat_axis.
Array all_to_all(const Array& x, const AxisNames& axes, int split_axis, int concat_axis);
// Sends x from member src to member dst along one axis for each (src, dst); members that receive
// nothing get zeros (jax.lax.ppermute).
Array ppermute(const Array& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm);
// This device's index along the axes (i32 scalar; several axes: linear index, first axis major).
Array axis_index(const AxisNames& axes);

namespace detail {

// The state of one shard_map'd function: mesh, specs and the per-signature cache of executables.
class ShardMapState {
 public:
  ShardMapState(Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
                std::string name);
  // Runs the body for these flattened arguments (tracing and compiling on a miss).
  std::vector<Array> call(const FlatArgs& flat,
                          const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body,
                          TreeDef& out_tree);
  int64_t cache_size() const;

 private:
  // Inside jit/grad/jvp/vmap: the body is traced on the local types and staged as a shard_map op (the
  // enclosing computation then runs on this mesh).
  std::vector<Array> call_in_trace(const FlatArgs& flat,
                                   const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body,
                                   TreeDef& out_tree);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace detail

template <typename F>
class ShardMapped {
 public:
  ShardMapped(F f, std::shared_ptr<detail::ShardMapState> state) : f_(std::move(f)), state_(std::move(state)) {}

  template <typename... Args>
    requires(detail::CallArg<Args> && ...)
  detail::traced_result_t<F, Args...> operator()(const Args&... args) const {
    using R = detail::traced_result_t<F, Args...>;
    static_assert(PyTree<R>, "mcx::shard_map: the function must return an Array or a pytree of Arrays");
    detail::FlatArgs flat = detail::flatten_args(args...);
    TreeDef out_tree;
    std::vector<Array> outs = state_->call(
        flat,
        [&](std::span<const Array> tracers, TreeDef& def) {
          auto result = detail::call_rebuilt(f_, flat, tracers, args...);
          auto [leaves, d] = tree_flatten(result);
          def = std::move(d);
          return leaves;
        },
        out_tree);
    return tree_unflatten<R>(out_tree, outs);
  }
  int64_t cache_size() const { return state_->cache_size(); }

 private:
  F f_;
  std::shared_ptr<detail::ShardMapState> state_;
};

template <typename F>
ShardMapped<std::decay_t<F>> shard_map(F&& f, Mesh mesh, std::vector<PartitionSpec> in_specs,
                                       std::vector<PartitionSpec> out_specs, std::string name = "shard_map") {
  return ShardMapped<std::decay_t<F>>(
      std::forward<F>(f), std::make_shared<detail::ShardMapState>(std::move(mesh), std::move(in_specs),
                                                                  std::move(out_specs), std::move(name)));
}

}  // namespace mcx
