// jit: trace a C++ function once per argument signature, optimise and compile the program, and run the
// compiled program on later calls with the same signature.
//
//   auto loss = [](const mcx::Tree& params, const mcx::Array& x, const mcx::Array& y) { ... };
//   auto loss_jit = mcx::jit(loss, {.name = "loss"});
//   mcx::Array l = loss_jit(params, x, y);
//
// Arguments: Arrays and pytrees of Arrays (pytree.h) are traced; arithmetic values, enums and
// std::string are static: part of the cache key and passed to the function unchanged (so `if (training)`
// on a bool argument is fine). Results: an Array or any pytree of Arrays (tuple, vector, Tree, ...).
// The cache key is (per argument) the tree structure and static values, plus every leaf's dtype, shape
// and weak type; a miss traces, runs the IR passes (dce/cse) when optimize is set, and compiles.
//
// Semantics follow jax.jit: the function must be pure. Python-style side effects (printing, mutating
// captured state) happen only while tracing. Concrete arrays the function captures become constants
// of the program (captured at trace time). Reading a traced value (item(), to_host(), `if (x > 0)`)
// throws ConcretizationError; use where()/select or a static argument instead. Calling a jitted function
// while a trace is active (inside another jit, grad, vjp or trace) inlines it: the function is traced
// into the enclosing trace.
//
// Sharded execution (jax.jit on a mesh): with in_shardings/out_shardings, or when arguments are
// committed to a multi-device sharding, or when the function calls with_sharding_constraint, the traced
// program is partitioned for the mesh (spmd/partitioner.h) and runs on every device of it, each device
// on its own stream; otherwise it runs on one device (the arguments' committed device or the default
// device). runtime/program_runner.h states the placement rules. Calls return at once (asynchronous
// dispatch); reading a result waits for it.
//
// Thread-safety: a Jitted object may be called concurrently from many threads; the cache is guarded by
// a mutex and tracing/compiling happen outside it (two threads missing on the same signature may both
// trace; the first result is kept). Copies of a Jitted share its cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mcx/core/dim_expr.h"
#include "mcx/ir/program.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/runtime/sharding.h"
#include "mcx/trace/array.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

struct JitOptions {
  std::string name = "function";  // used in error messages ("traced in jit of 'loss'") and as program name
  bool optimize = true;           // run dce/cse/constant folding before compiling
  // Shardings (jax.jit in_shardings/out_shardings), see "Sharded execution" above. in_shardings: empty,
  // or one entry per top-level argument (applies to every leaf of its pytree; nullopt: follow the
  // argument). out_shardings: empty, one entry for every output leaf, or one per output leaf.
  std::vector<std::optional<Sharding>> in_shardings = {};
  std::vector<std::optional<Sharding>> out_shardings = {};
  // Positions of top-level arguments whose buffers are donated: after the call their arrays are deleted
  // (reading them throws) and their memory is released as soon as the computation no longer needs it.
  std::vector<int> donate_argnums = {};
};

struct JitCacheStats {
  int64_t size = 0;    // number of cached signatures
  int64_t hits = 0;
  int64_t misses = 0;  // each miss traced and compiled
};

namespace detail {

// The non-template part of a jitted function: its options and per-signature cache.
class JitState {
 public:
  explicit JitState(JitOptions options) : options_(std::move(options)) {}

  struct Entry {
    ir::Program program;  // the optimised program that was compiled
    TreeDef out_tree;
    std::vector<bool> out_weak;
    RunOptions run_options;  // placement: per-leaf shardings, donation, constraint mesh, program key
  };

  // Returns the entry for flat.key, tracing (through trace_body, which returns the flat outputs and sets
  // the output TreeDef) and compiling on a miss.
  std::shared_ptr<const Entry> get_or_trace(
      const FlatArgs& flat,
      const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body);
  // Runs entry on the concrete leaves; throws for tracer leaves ("[jit] escaped tracer ...").
  std::vector<Array> execute(const Entry& entry, const FlatArgs& flat) const;

  const JitOptions& options() const { return options_; }
  JitCacheStats stats() const;
  // The placement options of one signature (per-leaf shardings and donation).
  RunOptions run_options_for(const std::string& what, const FlatArgs& flat, const ir::Program& program,
                             const std::optional<Mesh>& mesh) const;
  void clear();

 private:
  struct Impl;
  JitOptions options_;
  std::shared_ptr<Impl> impl_ = make_impl();
  static std::shared_ptr<Impl> make_impl();
};

}  // namespace detail

template <typename F>
class Jitted {
 public:
  Jitted(F f, JitOptions options)
      : f_(std::move(f)), state_(std::make_shared<detail::JitState>(std::move(options))) {}

  template <typename... Args>
    requires(detail::CallArg<Args> && ...)
  detail::traced_result_t<F, Args...> operator()(const Args&... args) const {
    using R = detail::traced_result_t<F, Args...>;
    static_assert(PyTree<R>, "mcx::jit: the function must return an Array or a pytree of Arrays");
    if (in_trace()) return f_(args...);  // inline into the enclosing trace
    detail::FlatArgs flat = detail::flatten_args(args...);
    auto entry = lookup(flat, args...);
    std::vector<Array> outs = state_->execute(*entry, flat);
    return tree_unflatten<R>(entry->out_tree, outs);
  }

  // The optimised program for these arguments (traced and compiled if not cached yet).
  template <typename... Args>
    requires(detail::CallArg<Args> && ...)
  ir::Program lower(const Args&... args) const {
    return lookup(detail::flatten_args(args...), args...)->program;
  }

  // The per-leaf shardings and donation the options give these flat arguments and their traced program (what
  // a call would run with; export_fn records them in the artifact). InvalidArgument as a call.
  RunOptions placement(const detail::FlatArgs& flat, const ir::Program& program) const {
    return state_->run_options_for("jit of '" + state_->options().name + "'", flat, program, std::nullopt);
  }

  JitCacheStats cache_stats() const { return state_->stats(); }
  int64_t cache_size() const { return state_->stats().size; }
  void clear_cache() const { state_->clear(); }
  const JitOptions& options() const { return state_->options(); }

 private:
  template <typename... Args>
  std::shared_ptr<const detail::JitState::Entry> lookup(const detail::FlatArgs& flat,
                                                        const Args&... args) const {
    return state_->get_or_trace(flat, [&](std::span<const Array> tracers, TreeDef& out_tree) {
      auto result = detail::call_rebuilt(f_, flat, tracers, args...);
      auto [leaves, def] = tree_flatten(result);
      out_tree = std::move(def);
      return leaves;
    });
  }

  F f_;
  std::shared_ptr<detail::JitState> state_;
};

namespace detail {
template <typename T>
inline constexpr bool is_jitted_v = false;
template <typename F>
inline constexpr bool is_jitted_v<Jitted<F>> = true;
}  // namespace detail

template <typename F>
Jitted<std::decay_t<F>> jit(F&& f, JitOptions options = {}) {
  return Jitted<std::decay_t<F>>(std::forward<F>(f), std::move(options));
}

// Traces f on abstract arguments and returns the (unoptimised) program, e.g. for printing:
//   mcx::trace(f, mcx::AbstractValue{DType::kFloat32, mcx::symbolic_shape("b, 784")})
// Arguments: AbstractValue (a traced leaf without data), Arrays/pytrees (traced with their types), static
// values. Symbolic dimensions are allowed; the scope holds constraints on their variables.
struct TraceOptions {
  std::string name = "main";
  SymbolicScope scope;
};
template <typename F, typename... Args>
  requires(detail::TraceableArg<Args> && ...)
ir::Program trace_with(const TraceOptions& options, const F& f, const Args&... args) {
  detail::FlatArgs flat = detail::flatten_args(args...);
  TracedFunction t = trace_flat("trace of '" + options.name + "'", options.name, flat.avals, flat.weak,
                                options.scope, [&](std::span<const Array> tracers) {
                                  return tree_leaves(detail::call_rebuilt(f, flat, tracers, args...));
                                },
                                detail::argument_leaf_names(flat));
  return std::move(t.program);
}
template <typename F, typename... Args>
  requires(detail::TraceableArg<Args> && ...)
ir::Program trace(const F& f, const Args&... args) {
  return trace_with(TraceOptions{}, f, args...);
}
template <typename F, typename... Args>
  requires(detail::TraceableArg<Args> && ...)
ir::Program trace(const F& f, const SymbolicScope& scope, const Args&... args) {
  return trace_with(TraceOptions{"main", scope}, f, args...);
}

// The types of f's results on the given arguments, without running it (jax.eval_shape): f is traced once on
// abstract values of the arguments' types; nothing is computed, compiled or transferred, and no argument's
// data is read. Arguments as trace() (AbstractValue leaves, arrays, pytrees, static values; symbolic
// dimensions allowed, with their constraints in `scope`). Errors: those of tracing f, e.g. InvalidArgument
// "[matmul] ... (traced in eval_shape of 'main' on args[0]: f32[b,784])".
struct ShapeResult {
  std::vector<AbstractValue> leaves;  // one per result leaf, in tree_flatten order
  TreeDef tree;                       // the structure of f's result
  std::string to_string() const;      // "f32[b,10]" for one leaf, else "(f32[b,10], i32[])"
};
template <typename F, typename... Args>
  requires(detail::TraceableArg<Args> && ...)
ShapeResult eval_shape_with(const TraceOptions& options, const F& f, const Args&... args) {
  detail::FlatArgs flat = detail::flatten_args(args...);
  TreeDef out_tree;
  TracedFunction t = trace_flat("eval_shape of '" + options.name + "'", options.name, flat.avals, flat.weak,
                                options.scope, [&](std::span<const Array> tracers) {
                                  auto [leaves, def] = tree_flatten(detail::call_rebuilt(f, flat, tracers, args...));
                                  out_tree = std::move(def);
                                  return leaves;
                                },
                                detail::argument_leaf_names(flat));
  return ShapeResult{t.program.result_types(), std::move(out_tree)};
}
template <typename F, typename... Args>
  requires(detail::TraceableArg<Args> && ...)
ShapeResult eval_shape(const F& f, const Args&... args) {
  return eval_shape_with(TraceOptions{}, f, args...);
}

}  // namespace mcx
