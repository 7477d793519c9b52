// Exporting traced functions with shape polymorphism, and calling exported artifacts (as jax.export).
//
//   auto predict = [](const mcx::Tree& params, const mcx::Array& x) { ... };
//   mcx::Exported exp = mcx::export_fn(predict, {.name = "predict", .constraints = {"b >= 1"}})(
//       params, mcx::AbstractValue{mcx::DType::kFloat32, mcx::symbolic_shape("b, 784")});
//   std::string bytes = exp.serialize();                     // FlatBuffers, versioned (artifact.h)
//   mcx::Exported back = mcx::Exported::deserialize(bytes);  // verified; throws on any bad input
//   std::vector<mcx::Array> out = back.call(params, x);      // any batch size b
//
// export_fn(f, options)(args...) traces f once: AbstractValue arguments become symbolic inputs (dims
// may be DimExprs such as "b", "2*b + 1"; options.constraints restrict them), Arrays and pytrees of
// Arrays become inputs of their own types (their values are not captured), static arguments (numbers,
// enums, strings) are baked into the program. Arrays the function captures become constants. The result
// records the program, the signature with per-input names ("args[0]['w']"), shardings as data, platforms,
// device count, versions and (options.with_vjp, for floating inputs) the exported VJP.
//
// Exported::call(args...) checks dtypes and ranks, solves the dimension variables from the argument
// shapes (shape_solve.h; errors name the argument, dimension, expression and value), checks the
// constraints, specialises the program to the concrete shapes and compiles it; the compiled program is
// cached per concrete signature, so one artifact serves many sizes. Inside an active trace (jit, grad,
// another export) the specialised program is inlined into the trace instead (symbolic caller shapes are
// solved symbolically). The platform must be among the artifact's platforms (unless the "platform"
// safety check is disabled). An artifact exported for N > 1 devices runs on a mesh with the recorded axes
// (those of its specified shardings; none specified: one axis "devices" of size N) with the recorded in and
// out shardings (unspecified ones replicated): over the devices of the first argument committed to a mesh
// with those axes (so a job spanning processes chooses its mesh), else over the first N devices; fewer than
// N devices is an error.
//
// Exporting a jitted function (export_fn(mcx::jit(f, {.in_shardings = ..., .donate_argnums = ...}))) records
// what the jit was given, as jax.export does: its in and out shardings (per flat input and output, the mesh's
// size as nr_devices), its donation (Exported::call then donates those inputs) and, when ExportOptions::name
// is left at its default, its name. Shardings given both to the jit and in ExportOptions are InvalidArgument:
// a layout is written once. to_sharding_spec turns any mcx::Sharding into the artifact's form, for
// ExportOptions::in_shardings / out_shardings of a function that is not jitted.
//
// Errors are thrown as mcx::Error subclasses (InvalidArgument) with messages starting "[export]",
// "[Exported.call]", "[Exported.vjp]" or "[deserialize]". Thread-safety: an Exported may be called from
// many threads at once (its cache is guarded by a std::mutex; specialisation and compilation happen outside
// it). Copies share the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mcx/export/artifact.h"
#include "mcx/trace/array.h"
#include "mcx/trace/jit.h"
#include "mcx/trace/pytree.h"
#include "mcx/trace/tracing.h"

namespace mcx {

// One recorded sharding of ExportOptions: from an mcx::Sharding (as a jit is given one; its device count then
// counts toward nr_devices) or from the artifact's ShardingSpec.
struct ExportSharding {
  ExportSharding(const Sharding& sharding);           // NOLINT: implicit, so {rows, replicated} reads naturally
  ExportSharding(exporting::ShardingSpec spec);       // NOLINT
  exporting::ShardingSpec spec;
  int64_t num_devices = 1;  // of the Sharding it was made from; 1 for a spec
};

struct ExportOptions {
  static constexpr std::string_view kDefaultName = "function";
  std::string name = std::string(kDefaultName);
  std::vector<std::string> constraints = {};        // e.g. "b >= 16", "b == 2*c"
  std::vector<std::string> platforms = {};  // empty: the default platform (device.h default_platform())
  std::vector<std::string> disabled_safety_checks = {};  // "platform": call on any platform
  std::vector<ExportSharding> in_shardings = {};   // one per flat input, or empty (unspecified)
  std::vector<ExportSharding> out_shardings = {};  // one per flat output, or empty
  uint32_t nr_devices = 1;  // at least the device count of any Sharding given above
  bool with_vjp = true;   // also export the VJP (when some input is floating)
  // How many nested VJPs (JAX's serialize(vjp_order=N)): 1 the VJP, 2 also the VJP's VJP (second order), ...;
  // at most exporting::Limits::max_vjp_depth (InvalidArgument above). Exported::vjp().vjp() reaches order 2.
  uint32_t vjp_order = 1;
  bool optimize = true;   // dead-code and common-subexpression elimination before export
  int64_t creation_time_unix_ms = -1;  // -1: now (tests pin it for reproducible bytes)
  // The calling convention version written (JAX's jax_export_calling_convention_version); default
  // MCX_EXPORT_CALLING_CONVENTION_VERSION, else the newest. Outside [kMinCallingConventionVersion,
  // kCallingConventionVersion]: InvalidArgument naming the range.
  std::optional<uint32_t> calling_convention_version = std::nullopt;
  // For older readers: the artifact may use only ops of this opset (it records the lowest opset its program
  // needs anyway); a newer op is an InvalidArgument naming it, a version outside [kMinOpsetVersion,
  // ir::kOpsetVersion] one naming the range.
  std::optional<uint32_t> max_opset_version = std::nullopt;
};

// The artifact's form of a sharding: a NamedSharding's mesh axes (names and sizes) and partition spec; a
// single-device sharding is "unspecified" (one device: nothing to record).
exporting::ShardingSpec to_sharding_spec(const Sharding& sharding);

struct ExportedCacheStats {
  int64_t size = 0;  // concrete signatures specialised
  int64_t hits = 0;
  int64_t misses = 0;
};

struct ShardedLayout;  // export.cc

class Exported {
 public:
  // Validates the artifact (exporting::validate; InvalidArgument "[export] ..." when inconsistent).
  explicit Exported(exporting::Artifact artifact);

  std::string serialize() const;
  static Exported deserialize(std::string_view bytes, const exporting::Limits& limits = {});

  const exporting::Artifact& artifact() const;
  const std::string& fun_name() const { return artifact().fun_name; }
  const std::vector<AbstractValue>& in_avals() const { return artifact().in_avals; }
  const std::vector<AbstractValue>& out_avals() const { return artifact().out_avals; }
  // JAX's ordered_effects / unordered_effects: "debug_print" when the function prints (in program order).
  const std::vector<std::string>& ordered_effects() const { return artifact().ordered_effects; }
  const std::vector<std::string>& unordered_effects() const { return artifact().unordered_effects; }

  // Calls with the flat inputs (one Array per input leaf); returns the flat outputs.
  std::vector<Array> call_flat(const std::vector<Array>& leaves) const;
  // Calls with the exported argument structure (pytrees checked against the exported input tree).
  template <typename... Args>
    requires(PyTree<Args> && ...)
  std::vector<Array> call(const Args&... args) const {
    std::vector<Array> leaves;
    std::vector<TreeDef> defs;
    defs.reserve(sizeof...(Args));
    auto add = [&](const auto& arg) {
      auto [l, d] = tree_flatten(arg);
      leaves.insert(leaves.end(), std::make_move_iterator(l.begin()), std::make_move_iterator(l.end()));
      defs.push_back(std::move(d));
    };
    (add(args), ...);
    check_in_tree(defs);
    return call_flat(leaves);
  }
  // Same, with the outputs in the exported output structure (tuples become lists, custom nodes Tree::Custom).
  template <typename... Args>
    requires(PyTree<Args> && ...)
  Tree call_tree(const Args&... args) const {
    return unflatten_outputs(call(args...));
  }
  // Same, with the outputs rebuilt as an R (JAX's exp.call returning the function's own result types, custom
  // nodes included): InvalidArgument naming both structures when the exported output is not an R.
  template <PyTree R, typename... Args>
    requires(PyTree<Args> && ...)
  R call_as(const Args&... args) const {
    return tree_unflatten<R>(out_def(), call(args...));
  }

  bool has_vjp() const { return artifact().vjp != nullptr; }
  // The exported backward function: (primal inputs..., output cotangents...) -> cotangents of the
  // floating inputs (artifact().vjp_wrt lists which). InvalidArgument when exported without it. Every
  // call returns a handle to the same Exported (one compile cache).
  Exported vjp() const;

  // JAX's in_shardings_jax(mesh) / out_shardings_jax(mesh): the recorded shardings as shardings over `mesh`,
  // one per flat input (output); nullopt where none was recorded. The mesh must have nr_devices devices and,
  // where a sharding was recorded, the recorded axis sizes in order (its axis names are taken positionally, so
  // any mesh of that layout serves). InvalidArgument naming both meshes otherwise.
  std::vector<std::optional<Sharding>> in_shardings_jax(const Mesh& mesh) const;
  std::vector<std::optional<Sharding>> out_shardings_jax(const Mesh& mesh) const;

  ExportedCacheStats cache_stats() const;

 private:
  struct State;
  explicit Exported(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Exported(exporting::Artifact artifact, bool validated);
  void check_in_tree(const std::vector<TreeDef>& defs) const;
  // nr_devices > 1: the mesh and shardings this call runs with (see the header comment).
  std::shared_ptr<const ShardedLayout> sharded_layout(const std::vector<Array>& leaves) const;
  Tree unflatten_outputs(const std::vector<Array>& outs) const;
  const TreeDef& out_def() const;  // the recorded output structure (converted once, at construction)
  std::shared_ptr<State> state_;
};

namespace detail {
// The non-template part of export_fn: builds the artifact from a traced program.
// jit_placement: the exported function's jit options applied to these arguments (Jitted::placement), or null.
Exported make_exported(const ExportOptions& options, const FlatArgs& flat, const std::vector<bool>& is_input,
                       const TracedFunction& traced, const TreeDef& out_tree, const RunOptions* jit_placement = nullptr);
exporting::TreeSpec to_tree_spec(const TreeDef& def);
TreeDef from_tree_spec(const exporting::TreeSpec& spec);
}  // namespace detail

template <typename F>
class Exporter {
 public:
  Exporter(F f, ExportOptions options) : f_(std::move(f)), options_(std::move(options)) {}

  template <typename... Args>
    requires(detail::TraceableArg<Args> && ...)
  Exported operator()(const Args&... args) const {
    ExportOptions options = options_;
    if constexpr (detail::is_jitted_v<F>) {
      if (options.name == ExportOptions::kDefaultName) options.name = f_.options().name;
    }
    if (in_trace()) throw InvalidArgument("[export] '" + options.name + "': export inside an active trace");
    detail::FlatArgs flat = detail::flatten_args(args...);
    std::vector<bool> is_input = {(PyTree<Args> || std::is_same_v<Args, AbstractValue>)...};
    SymbolicScope scope = value_or_throw(SymbolicScope::create(options.constraints));
    TreeDef out_tree;
    TracedFunction t = trace_flat("export of '" + options.name + "'", options.name, flat.avals, flat.weak,
                                  scope, [&](std::span<const Array> tracers) {
                                    auto [leaves, def] = tree_flatten(detail::call_rebuilt(f_, flat, tracers, args...));
                                    out_tree = std::move(def);
                                    return leaves;
                                  },
                                  detail::argument_leaf_names(flat));
    if constexpr (detail::is_jitted_v<F>) {
      const RunOptions placement = f_.placement(flat, t.program);
      return detail::make_exported(options, flat, is_input, t, out_tree, &placement);
    } else {
      return detail::make_exported(options, flat, is_input, t, out_tree);
    }
  }

 private:
  F f_;
  ExportOptions options_;
};

// jax.export.symbolic_args_specs: the abstract values to export with, from example arrays and shape specs
// ("b, _, 3", "...", "b, ..."; symbolic_shape(spec, like) with the example's shape): one spec for every
// argument, or one per argument. The variables of every spec are shared (one scope: constraints go to
// ExportOptions::constraints). InvalidArgument naming the argument and the spec.
std::vector<AbstractValue> symbolic_args_specs(const std::vector<Array>& args, const std::vector<std::string>& specs);

// `export` is a C++ keyword, hence export_fn.
template <typename F>
Exporter<std::decay_t<F>> export_fn(F&& f, ExportOptions options = {}) {
  return Exporter<std::decay_t<F>>(std::forward<F>(f), std::move(options));
}

}  // namespace mcx
