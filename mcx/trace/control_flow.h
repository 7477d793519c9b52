// Structured control flow, as jax.lax: while_loop, fori_loop, scan, cond and switch_.
//
//   // sum of squares 0..9, in a loop that is staged once, not unrolled:
//   mcx::Array total = mcx::fori_loop(0, 10, [](const mcx::Array& i, const mcx::Array& acc) {
//     return acc + mcx::astype(i * i, mcx::DType::kFloat32);
//   }, mcx::zeros({}, mcx::DType::kFloat32));
//
//   // a running sum with the per-step outputs stacked (scan):
//   auto [last, partial] = mcx::scan([](const mcx::Array& c, const mcx::Array& x) {
//     mcx::Array s = c + x;
//     return std::pair{s, s};
//   }, mcx::zeros({3}), xs);   // xs: f32[T, 3]; partial: f32[T, 3]
//
// The functions are traced once, on abstract values of the carry's (and slice's) types, into sub-programs of
// one IR op (op.h: while, scan, cond; opset 7), so a loop of a million iterations costs one trace and one
// compile; under jit the op is part of the jitted program, and outside any trace it runs at once (compiled
// and cached like any eager op). Carries and operands are pytrees (pytree.h); arrays the functions close
// over become extra operands of the op. The carry's structure, dtypes and shapes must stay the same through
// the loop: a change is InvalidArgument naming the leaf, e.g. "[while_loop] body_fun returns carry leaf [1]
// as f32[3], the initial carry has f32[2]" (JAX's rule; use astype to keep a dtype). Functions must be pure
// (they are traced, not called per iteration): a C++ side effect happens once, at trace time.
//
// Transformations: grad/vjp and jvp/linearize/jacfwd/jacrev/hessian differentiate scan, fori_loop with
// static bounds and cond (ir/control_flow_autodiff.h); while_loop (and fori_loop with Array bounds)
// differentiates in forward mode only, as in JAX (grad raises Unimplemented naming the loop). vmap
// vectorises all of them (ir/control_flow_batching.h). On a mesh they run partitioned: each body works
// on local shards with its collectives inside (spmd/region_partition.h).
//
// Thread-safety: as tracing: each call stages into the calling thread's innermost trace.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mcx/core/shape.h"
#include "mcx/ir/attrs.h"
#include "mcx/ir/op.h"
#include "mcx/trace/array.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {
namespace detail {

// A traced sub-program: parameters are the given leaves then the captured arrays.
struct TracedRegion {
  ir::Program program;
  std::vector<Array> captured;
  std::optional<Mesh> mesh;  // the mesh its shard_maps or sharding constraints need (TracedFunction::mesh)
};

// The one mesh the regions need (nullopt when none needs one); InvalidArgument naming both when two differ.
std::optional<Mesh> mesh_of_regions(const char* api, std::initializer_list<const TracedRegion*> regions);
std::optional<Mesh> mesh_of_regions(const char* api, const std::vector<TracedRegion>& regions);

// Traces fn on tracers of the given types in a nested trace (of the current scope) and returns the
// program. `api` and `role` name it in errors ("[scan] body_fun ...").
TracedRegion trace_region(const char* api, const char* role, const std::vector<AbstractValue>& avals,
                          const std::vector<bool>& weak,
                          const std::function<std::vector<Array>(std::span<const Array>)>& fn);

// Checks that a function's result leaves match the expected types (structure checked by the caller):
// InvalidArgument "[api] <role> returns <what> leaf <path> as <found>, <expected_from> has <expected>".
void check_leaf_types(const char* api, const char* role, const char* what, const char* expected_from,
                      const TreeDef& def, std::span<const AbstractValue> found,
                      std::span<const AbstractValue> expected);
void check_same_structure(const char* api, const char* role, const char* what, const TreeDef& found,
                          const TreeDef& expected);

// Emits the `num_results` siblings of a control-flow op (attrs without `result`) on the operands: into the
// current trace, or run at once outside traces (on `mesh` when its regions need one: a loop whose body calls
// shard_map). Returns the results in order.
std::vector<Array> bind_control_flow(const char* api, ir::OpKind kind, const ir::Attrs& attrs,
                                     const std::vector<Array>& operands, int num_results,
                                     const std::optional<Mesh>& mesh = std::nullopt);

std::vector<Array> while_loop_flat(const std::vector<Array>& init, const TreeDef& def,
                                   const std::function<Array(std::span<const Array>)>& cond_fun,
                                   const std::function<std::vector<Array>(std::span<const Array>)>& body_fun);
std::vector<AbstractValue> avals_of(std::span<const Array> leaves);
std::vector<bool> weak_of(std::span<const Array> leaves);
std::vector<Array> with_weak(std::vector<Array> leaves, std::span<const Array> like);
// The leading dimension every x leaf shares (InvalidArgument naming the leaf otherwise), or `length`.
int64_t scan_length(const std::vector<Array>& xs, const TreeDef& def, std::optional<int64_t> length);
// The scan op on flat leaves (body traced on carries then x slices). Returns carries then stacked ys.
std::vector<Array> scan_flat(const std::vector<Array>& init, const std::vector<Array>& xs, int64_t length,
                             bool reverse, const TracedRegion& body, int num_ys);
// The branch index as i32[]: cond takes a bool[] predicate, switch an integer scalar (InvalidArgument naming
// what was found otherwise).
Array branch_index(const char* api, const Array& index);
std::vector<Array> switch_flat(const char* api, const Array& index, const std::vector<Array>& operands,
                               const std::vector<TracedRegion>& branches, const TreeDef& out_def, int num_results);
// The i32[] loop counter fori_loop starts from (InvalidArgument when a bound does not fit in int32).
Array fori_start(int64_t lower, int64_t upper);

template <typename R, typename Op>
R switch_impl(const char* api, const Array& index, const std::vector<std::function<R(const Op&)>>& branches,
              const Op& operand) {
  Array i32_index = branch_index(api, index);
  auto [leaves, def] = tree_flatten(operand);
  std::vector<TracedRegion> traced;
  TreeDef out_def;
  for (size_t b = 0; b < branches.size(); ++b) {
    traced.push_back(trace_region(api, "branch", avals_of(leaves), weak_of(leaves), [&](std::span<const Array> in) {
      auto [out, d] = tree_flatten(branches[b](tree_unflatten<Op>(def, in)));
      if (b == 0) out_def = d;
      check_same_structure(api, "a branch", "result", d, out_def);
      return out;
    }));
  }
  const int n = static_cast<int>(traced.empty() ? 0 : traced[0].program.results.size());
  return tree_unflatten<R>(out_def, switch_flat(api, i32_index, leaves, traced, out_def, n));
}

}  // namespace detail

// Runs body_fun while cond_fun is true (jax.lax.while_loop): cond_fun(carry) -> bool[] Array, body_fun(carry)
// -> carry of the same structure and types. Not reverse-differentiable (as in JAX).
template <typename C, typename B, PyTree T>
T while_loop(const C& cond_fun, const B& body_fun, const T& init) {
  auto [leaves, def] = tree_flatten(init);
  auto cond_flat = [&](std::span<const Array> c) -> Array { return cond_fun(tree_unflatten<T>(def, c)); };
  auto body_flat = [&](std::span<const Array> c) -> std::vector<Array> {
    auto [out, out_def] = tree_flatten(T(body_fun(tree_unflatten<T>(def, c))));
    detail::check_same_structure("while_loop", "body_fun", "carry", out_def, def);
    return out;
  };
  return tree_unflatten<T>(def, detail::while_loop_flat(leaves, def, cond_flat, body_flat));
}

struct ScanOptions {
  std::optional<int64_t> length;  // required when xs has no leaves; else must equal their leading dim
  bool reverse = false;           // iterate t = length-1 down to 0 (ys are still indexed by t)
};

// jax.lax.scan: f(carry, x) -> std::pair(carry, y); x is xs with the leading dim indexed by the iteration.
// Returns std::pair(final carry, ys) where each y leaf is stacked along a new leading dim of size length.
template <typename F, PyTree C, PyTree X>
auto scan(const F& f, const C& init, const X& xs, ScanOptions options = {}) {
  using R = std::invoke_result_t<const F&, const C&, const X&>;
  using Y = std::remove_cvref_t<typename R::second_type>;
  static_assert(PyTree<Y>, "mcx::scan: f must return std::pair<carry, y> with y a pytree of Arrays");
  auto [carry_leaves, carry_def] = tree_flatten(init);
  auto [x_leaves, x_def] = tree_flatten(xs);
  const int64_t length = detail::scan_length(x_leaves, x_def, options.length);
  std::vector<AbstractValue> avals = detail::avals_of(carry_leaves);
  std::vector<bool> weak = detail::weak_of(carry_leaves);
  for (const Array& x : x_leaves) {
    AbstractValue a = x.aval();
    a.shape.erase(a.shape.begin());
    avals.push_back(std::move(a));
    weak.push_back(x.weak_type());
  }
  const size_t nc = carry_leaves.size();
  TreeDef y_def;
  detail::TracedRegion body = detail::trace_region("scan", "f", avals, weak, [&](std::span<const Array> in) {
    R r = f(tree_unflatten<C>(carry_def, in.subspan(0, nc)), tree_unflatten<X>(x_def, in.subspan(nc)));
    auto [c_out, c_def] = tree_flatten(C(r.first));
    detail::check_same_structure("scan", "f", "carry", c_def, carry_def);
    detail::check_leaf_types("scan", "f", "carry", "the initial carry", carry_def, detail::avals_of(c_out),
                             std::span<const AbstractValue>(avals).subspan(0, nc));
    auto [y_out, yd] = tree_flatten(r.second);
    y_def = yd;
    c_out.insert(c_out.end(), y_out.begin(), y_out.end());
    return c_out;
  });
  const int ny = static_cast<int>(body.program.results.size() - nc);
  std::vector<Array> out = detail::scan_flat(carry_leaves, x_leaves, length, options.reverse, body, ny);
  std::span<const Array> all(out);
  return std::pair<C, Y>(tree_unflatten<C>(carry_def, all.subspan(0, nc)),
                         tree_unflatten<Y>(y_def, all.subspan(nc)));
}

// jax.lax.fori_loop with static bounds: body(i, carry) -> carry for i = lower .. upper-1 (i an i32[]
// Array). Staged as a scan of upper - lower steps (zero when upper <= lower).
template <typename B, PyTree T>
T fori_loop(int64_t lower, int64_t upper, const B& body, const T& init) {
  using State = std::pair<Array, T>;
  auto step = [&](const State& s, const std::vector<Array>&) {
    return std::pair<State, std::vector<Array>>(State(s.first + 1, T(body(s.first, s.second))), {});
  };
  ScanOptions options;
  options.length = std::max<int64_t>(0, upper - lower);
  State start(detail::fori_start(lower, upper), init);
  return scan(step, start, std::vector<Array>{}, options).first.second;
}

// fori_loop with traced (Array) bounds: a while loop, so not reverse-differentiable (as in JAX).
template <typename B, PyTree T>
T fori_loop(const Array& lower, const Array& upper, const B& body, const T& init) {
  using State = std::tuple<Array, Array, T>;
  State start(lower, upper, init);
  State end = while_loop([](const State& s) { return std::get<0>(s) < std::get<1>(s); },
                         [&](const State& s) {
                           return State(std::get<0>(s) + 1, std::get<1>(s), T(body(std::get<0>(s), std::get<2>(s))));
                         },
                         start);
  return std::get<2>(end);
}

// jax.lax.switch: runs branches[clamp(index, 0, n-1)](operand); every branch returns the same structure
// and types (checked: the error names the branch and the leaf). index: an integer scalar Array; branches
// not empty. Only the chosen branch runs.
template <typename R, PyTree Op>
R switch_(const Array& index, const std::vector<std::function<R(const Op&)>>& branches, const Op& operand) {
  return detail::switch_impl<R, Op>("switch", index, branches, operand);
}

// jax.lax.cond: true_fun(operand) when pred (a bool[] Array) is true, else false_fun(operand); both return
// the same structure and types. Only the chosen function runs.
template <typename T, typename F, PyTree Op>
auto cond(const Array& pred, const T& true_fun, const F& false_fun, const Op& operand) {
  using R = std::remove_cvref_t<std::invoke_result_t<const T&, const Op&>>;
  std::vector<std::function<R(const Op&)>> branches{[&](const Op& o) { return R(false_fun(o)); },
                                                   [&](const Op& o) { return R(true_fun(o)); }};
  return detail::switch_impl<R, Op>("cond", pred, branches, operand);
}

}  // namespace mcx
