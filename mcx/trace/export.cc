#include "mcx/trace/export.h"

#include <algorithm>
#include <chrono>

#include "absl/container/flat_hash_map.h"
#include <mutex>
#include "mcx/core/config.h"
#include "mcx/export/shape_solve.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/fingerprint.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/str_util.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/trace_state.h"

namespace mcx {

using exporting::Artifact;
using exporting::ShardingSpec;
using exporting::TreeSpec;
using ir::internal::cat;
using ir::internal::join;

// ---- tree conversion --------------------------------------------------------------------------------

namespace detail {

TreeSpec to_tree_spec(const TreeDef& def) {
  TreeSpec s;
  s.kind = static_cast<TreeSpec::Kind>(static_cast<int>(def.kind()));
  s.keys = def.keys();
  s.custom_name = def.custom_name();
  s.aux = def.aux();
  for (const TreeDef& c : def.children()) s.children.push_back(to_tree_spec(c));
  return s;
}

TreeDef from_tree_spec(const TreeSpec& spec) {
  std::vector<TreeDef> children;
  for (const TreeSpec& c : spec.children) children.push_back(from_tree_spec(c));
  switch (spec.kind) {
    case TreeSpec::Kind::kLeaf: return TreeDef::leaf();
    case TreeSpec::Kind::kList: return TreeDef::list(std::move(children));
    case TreeSpec::Kind::kTuple: return TreeDef::tuple(std::move(children));
    case TreeSpec::Kind::kDict: return TreeDef::dict(spec.keys, std::move(children));
    case TreeSpec::Kind::kCustom: return TreeDef::custom(spec.custom_name, spec.aux, std::move(children));
  }
  return TreeDef::leaf();
}

namespace {

void leaf_names(const TreeSpec& t, const std::string& prefix, std::vector<std::string>& out) {
  if (t.kind == TreeSpec::Kind::kLeaf) {
    out.push_back(prefix);
    return;
  }
  for (size_t i = 0; i < t.children.size(); ++i) {
    leaf_names(t.children[i], t.kind == TreeSpec::Kind::kDict ? cat(prefix, "['", t.keys[i], "']") : cat(prefix, "[", i, "]"),
               out);
  }
}

std::vector<ShardingSpec> shardings_or_unspecified(const std::vector<ExportSharding>& given, size_t n,
                                                   const char* what, const std::string& name) {
  if (given.empty()) return std::vector<ShardingSpec>(n);
  if (given.size() != n) {
    throw InvalidArgument(cat("[export] '", name, "': ", given.size(), " ", what, " shardings for ", n, " ", what, "s"));
  }
  std::vector<ShardingSpec> out;
  out.reserve(n);
  for (const ExportSharding& g : given) out.push_back(g.spec);
  return out;
}

// The device count the options' Shardings need (nr_devices is at least this).
uint32_t devices_of(const std::vector<ExportSharding>& given) {
  int64_t n = 1;
  for (const ExportSharding& g : given) n = std::max(n, g.num_devices);
  return static_cast<uint32_t>(n);
}

bool any_specified(const std::vector<ShardingSpec>& specs) {
  return std::any_of(specs.begin(), specs.end(), [](const ShardingSpec& s) { return !s.unspecified; });
}

// A function that must run on a mesh (it calls shard_map or constrains shardings) records it when no shardings
// were given (in ExportOptions or to the exported jit): its inputs replicated on the mesh's axes, nr_devices the
// mesh's size, so that Exported.call and `mcx-export run` run it on a mesh of that shape. Given shardings are
// kept as they are.
void record_mesh(const Mesh& mesh, const ExportOptions& options, Artifact& a) {
  if (!options.in_shardings.empty() || !options.out_shardings.empty()) return;
  if (any_specified(a.in_shardings) || any_specified(a.out_shardings)) return;
  ShardingSpec replicated;
  replicated.unspecified = false;
  replicated.mesh_axis_names = mesh.axes().names;
  replicated.mesh_axis_sizes = mesh.axes().sizes;
  a.in_shardings.assign(a.in_avals.size(), replicated);
  a.nr_devices = static_cast<uint32_t>(mesh.size());
}

// Records the exported jit's shardings and donation (its options applied to the traced arguments) in the
// artifact; the device count is the size of the mesh they use.
void record_jit_placement(const RunOptions& jit, const ExportOptions& options, Artifact& a) {
  const bool jit_shards = !jit.in_shardings.empty() || !jit.out_shardings.empty();
  if (jit_shards && (!options.in_shardings.empty() || !options.out_shardings.empty())) {
    throw InvalidArgument(cat("[export] '", options.name, "': shardings given twice, to the jit (in_shardings / "
                              "out_shardings) and in ExportOptions; give them once (the jit's are recorded)"));
  }
  // (run_options_for gives one entry per flat input, one per output, or none)
  auto specs = [&](const std::vector<std::optional<Sharding>>& given, std::vector<ShardingSpec>& out) {
    if (given.empty()) return;
    out.assign(given.size(), ShardingSpec());
    for (size_t i = 0; i < given.size(); ++i) {
      if (!given[i]) continue;
      out[i] = to_sharding_spec(*given[i]);
      if (!out[i].unspecified) a.nr_devices = std::max(a.nr_devices, static_cast<uint32_t>(given[i]->num_devices()));
    }
  };
  specs(jit.in_shardings, a.in_shardings);
  specs(jit.out_shardings, a.out_shardings);
  for (size_t i = 0; i < jit.donate.size(); ++i) {
    if (jit.donate[i]) a.donated_inputs.push_back(static_cast<int>(i));
  }
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const Flag<int64_t> kCallingConventionFlag(
    "MCX_EXPORT_CALLING_CONVENTION_VERSION", exporting::kCallingConventionVersion,
    "the calling convention version export writes (JAX's jax_export_calling_convention_version)");

// The calling convention to write: the option, else MCX_EXPORT_CALLING_CONVENTION_VERSION, checked against
// the range this build writes.
uint32_t requested_calling_convention(const ExportOptions& options) {
  const int64_t v = options.calling_convention_version ? static_cast<int64_t>(*options.calling_convention_version)
                                                       : value_or_throw(kCallingConventionFlag.get());
  if (v < exporting::kMinCallingConventionVersion || v > exporting::kCallingConventionVersion) {
    throw InvalidArgument(cat("[export] '", options.name, "': calling convention version ", v,
                              " is outside the supported range [", exporting::kMinCallingConventionVersion, ", ",
                              exporting::kCallingConventionVersion, "]"));
  }
  return static_cast<uint32_t>(v);
}

// The first instruction (depth first, into regions) whose op needs an opset above `ceiling`, as "op (opset n)".
std::optional<std::string> first_op_above(const ir::Program& p, int ceiling) {
  for (const ir::Instr& ins : p.instrs) {
    if (ir::op_info(ins.kind).opset > ceiling) {
      return cat(std::string(ir::op_name(ins.kind)), " (opset ", ir::op_info(ins.kind).opset, ")");
    }
    for (const auto& [name, value] : ins.attrs.entries()) {
      if (const auto* regions = std::get_if<ir::Regions>(&value)) {
        for (const auto& region : *regions) {
          if (auto found = first_op_above(*region, ceiling)) return found;
        }
      }
    }
  }
  return std::nullopt;
}

// An artifact for older readers (ExportOptions::max_opset_version): the program and its VJP must use only ops of
// that opset; otherwise the op that needs a newer one is named.
void check_opset_ceiling(const Artifact& a, uint32_t ceiling, const std::string& name) {
  if (ceiling < exporting::kMinOpsetVersion || ceiling > static_cast<uint32_t>(ir::kOpsetVersion)) {
    throw InvalidArgument(cat("[export] '", name, "': opset version ", ceiling, " is outside the supported range [",
                              exporting::kMinOpsetVersion, ", ", ir::kOpsetVersion, "]"));
  }
  if (auto op = first_op_above(a.program, static_cast<int>(ceiling))) {
    throw InvalidArgument(cat("[export] '", name, "': readers of opset ", ceiling, " cannot run it: it uses ", *op));
  }
  if (a.vjp) {
    if (auto op = first_op_above(a.vjp->program, static_cast<int>(ceiling))) {
      throw InvalidArgument(cat("[export] '", name, "': readers of opset ", ceiling, " cannot run its VJP: it uses ",
                                *op, " (export with with_vjp = false to leave the VJP out)"));
    }
  }
}

// The VJP artifact of `a`: (primals..., output cotangents...) -> cotangents of the floating inputs.
std::shared_ptr<const Artifact> make_vjp(const Artifact& a) {
  std::vector<int> wrt;
  for (size_t i = 0; i < a.in_avals.size(); ++i) {
    if (is_floating(a.in_avals[i].dtype)) wrt.push_back(static_cast<int>(i));
  }
  if (wrt.empty()) return nullptr;
  absl::StatusOr<ir::Program> vjp_or = ir::vjp_program(a.program, wrt);
  // A program reverse mode does not handle (control flow, opset 7) is exported without its VJP.
  if (absl::IsUnimplemented(vjp_or.status())) return nullptr;
  ir::Program vjp = value_or_throw(std::move(vjp_or));
  // Keep only the cotangents: the primal results are the first out_avals.size() results.
  vjp.results.erase(vjp.results.begin(), vjp.results.begin() + static_cast<long>(a.out_avals.size()));
  // The VJP replays the forward pass: it prints nothing again (debug_print's rule under vjp).
  vjp = ir::drop_side_effects(vjp);
  vjp.name = a.program.name + "_vjp";
  Artifact v;
  v.opset_version = a.opset_version;
  v.producer = a.producer;
  v.creation_time_unix_ms = a.creation_time_unix_ms;
  v.fun_name = a.fun_name + ".vjp";
  TreeSpec ct_tree = a.out_tree;
  v.in_tree.kind = TreeSpec::Kind::kTuple;
  v.in_tree.children = a.in_tree.children;
  v.in_tree.children.push_back(ct_tree);
  v.in_names = a.in_names;
  std::vector<std::string> ct_names;
  leaf_names(a.out_tree, "cotangent", ct_names);
  v.in_names.insert(v.in_names.end(), ct_names.begin(), ct_names.end());
  v.in_avals = vjp.params;
  v.out_avals = vjp.result_types();
  v.out_tree.kind = TreeSpec::Kind::kTuple;
  v.out_tree.children.resize(wrt.size());
  v.in_shardings.resize(v.in_avals.size());
  v.out_shardings.resize(v.out_avals.size());
  v.nr_devices = a.nr_devices;
  v.platforms = a.platforms;
  v.constraints = a.constraints;
  v.disabled_safety_checks = a.disabled_safety_checks;
  v.program = std::move(vjp);
  v.ordered_effects = exporting::program_effects(v.program);  // none: its prints were dropped above
  v.vjp_wrt = {};
  throw_if_error(exporting::validate(v));
  return std::make_shared<const Artifact>(std::move(v));
}

// Attaches a's VJP, that VJP's own VJP, ... `order` levels deep (JAX's serialize(vjp_order=N)); a level whose
// program reverse mode does not differentiate ends the chain there.
void attach_vjps(Artifact& a, uint32_t order) {
  std::shared_ptr<const Artifact> v = make_vjp(a);
  if (!v) return;
  a.vjp_wrt.clear();
  for (size_t i = 0; i < a.in_avals.size(); ++i) {
    if (is_floating(a.in_avals[i].dtype)) a.vjp_wrt.push_back(static_cast<int>(i));
  }
  if (order > 1) {
    Artifact next = *v;
    attach_vjps(next, order - 1);
    v = std::make_shared<const Artifact>(std::move(next));
  }
  a.vjp = std::move(v);
}

}  // namespace

Exported make_exported(const ExportOptions& options, const FlatArgs& flat, const std::vector<bool>& is_input,
                       const TracedFunction& traced, const TreeDef& out_tree, const RunOptions* jit_placement) {
  if (!traced.captured.empty()) {
    throw InvalidArgument(cat("[export] '", options.name, "': the function captures tracers of an enclosing trace"));
  }
  Artifact a;
  // Set below from the program: the lowest opset that reads it, so artifacts without SPMD ops stay
  // readable by opset-1 readers.
  a.producer = exporting::producer_string();
  a.creation_time_unix_ms = options.creation_time_unix_ms >= 0 ? options.creation_time_unix_ms : now_unix_ms();
  a.fun_name = options.name;
  a.in_tree.kind = TreeSpec::Kind::kTuple;
  for (size_t i = 0; i < flat.defs.size(); ++i) {
    if (!is_input[i]) continue;  // static arguments are baked into the program
    TreeSpec arg = to_tree_spec(flat.defs[i]);
    leaf_names(arg, cat("args[", i, "]"), a.in_names);
    a.in_tree.children.push_back(std::move(arg));
  }
  a.out_tree = to_tree_spec(out_tree);
  a.program = options.optimize ? ir::eliminate_dead_code(ir::eliminate_common_subexpressions(traced.program))
                               : traced.program;
  a.opset_version = static_cast<uint32_t>(ir::required_opset(a.program));  // the VJP needs the same ops
  a.in_avals = a.program.params;
  a.out_avals = a.program.result_types();
  a.in_shardings = shardings_or_unspecified(options.in_shardings, a.in_avals.size(), "input", options.name);
  a.out_shardings = shardings_or_unspecified(options.out_shardings, a.out_avals.size(), "output", options.name);
  a.nr_devices = std::max({options.nr_devices, devices_of(options.in_shardings), devices_of(options.out_shardings)});
  if (jit_placement != nullptr) record_jit_placement(*jit_placement, options, a);
  if (traced.mesh) record_mesh(*traced.mesh, options, a);
  a.platforms = options.platforms.empty() ? std::vector<std::string>{default_platform()} : options.platforms;
  a.constraints = a.program.scope.constraints();
  a.ordered_effects = exporting::program_effects(a.program);
  a.disabled_safety_checks = options.disabled_safety_checks;
  for (const std::string& c : a.disabled_safety_checks) {
    if (c != "platform") {
      throw InvalidArgument(cat("[export] '", options.name, "': unknown safety check '", c, "' (known: platform)"));
    }
  }
  a.calling_convention_version = requested_calling_convention(options);
  throw_if_error(exporting::validate(a));
  if (options.with_vjp && options.vjp_order > 0) {
    const exporting::Limits limits;
    if (options.vjp_order > static_cast<uint32_t>(limits.max_vjp_depth)) {
      throw InvalidArgument(cat("[export] '", options.name, "': vjp_order ", options.vjp_order,
                                " is above the ", limits.max_vjp_depth, " nested VJPs a reader accepts"));
    }
    attach_vjps(a, options.vjp_order);
  }
  if (options.max_opset_version) check_opset_ceiling(a, *options.max_opset_version, options.name);
  return Exported(std::move(a));
}

}  // namespace detail

// ---- Exported --------------------------------------------------------------------------------------

// Where a sharded artifact runs: a mesh with the recorded axes and the recorded shardings on it (nullopt:
// unspecified, placed replicated).
struct ShardedLayout {
  Mesh mesh;
  std::vector<std::optional<Sharding>> in, out;
};

namespace {

// The mesh axes of the artifact's specified shardings; all must agree. None specified: one axis "devices"
// over nr_devices.
MeshAxes recorded_axes(const Artifact& a) {
  std::optional<MeshAxes> axes;
  for (const auto* list : {&a.in_shardings, &a.out_shardings}) {
    for (const exporting::ShardingSpec& s : *list) {
      if (s.unspecified) continue;
      MeshAxes m{s.mesh_axis_names, s.mesh_axis_sizes};
      if (!axes) {
        axes = m;
      } else if (!(*axes == m)) {
        throw InvalidArgument(cat("[Exported.call] '", a.fun_name, "': the recorded shardings use two meshes, ",
                                  axes->to_string(), " and ", m.to_string(), "; expected one"));
      }
    }
  }
  if (axes) return *axes;
  return MeshAxes{{"devices"}, {static_cast<int64_t>(a.nr_devices)}};
}

}  // namespace

ExportSharding::ExportSharding(const Sharding& sharding)
    : spec(to_sharding_spec(sharding)), num_devices(sharding.num_devices()) {}
ExportSharding::ExportSharding(exporting::ShardingSpec s) : spec(std::move(s)) {}

exporting::ShardingSpec to_sharding_spec(const Sharding& sharding) {
  exporting::ShardingSpec out;
  if (sharding.is_single_device()) return out;
  out.unspecified = false;
  out.mesh_axis_names = sharding.mesh().axis_names();
  out.mesh_axis_sizes = sharding.mesh().axis_sizes();
  for (const DimSpec& d : sharding.spec().dims()) out.spec.push_back(d.axes);  // (a Sharding is never Unconstrained)
  return out;
}

namespace {

// A recorded spec over `mesh`, its axes named by position: the recorded mesh's i-th axis is mesh's i-th.
Sharding spec_over(const exporting::ShardingSpec& s, const Mesh& mesh) {
  std::vector<DimSpec> dims;
  for (const auto& names : s.spec) {
    std::vector<std::string> renamed;
    for (const std::string& n : names) {
      const auto it = std::find(s.mesh_axis_names.begin(), s.mesh_axis_names.end(), n);
      if (it == s.mesh_axis_names.end() || static_cast<size_t>(it - s.mesh_axis_names.begin()) >= mesh.axis_names().size()) {
        // validate() refuses such artifacts; never an index past the end
        throw InvalidArgument(cat("[export] the recorded sharding ", s.to_string(), " names an axis '", n,
                                  "' its mesh does not have"));
      }
      renamed.push_back(mesh.axis_names()[static_cast<size_t>(it - s.mesh_axis_names.begin())]);
    }
    dims.push_back(DimSpec{std::move(renamed), false});
  }
  return NamedSharding(mesh, PartitionSpec(std::move(dims)));
}

std::vector<std::optional<Sharding>> shardings_on(const Mesh& mesh, const std::vector<exporting::ShardingSpec>& specs) {
  std::vector<std::optional<Sharding>> out;
  out.reserve(specs.size());
  for (const exporting::ShardingSpec& s : specs) {
    if (s.unspecified) {
      out.emplace_back();
    } else {
      out.emplace_back(spec_over(s, mesh));
    }
  }
  return out;
}

std::shared_ptr<const ShardedLayout> layout_on(const Artifact& a, Mesh mesh) {
  auto layout = std::make_shared<ShardedLayout>(ShardedLayout{mesh, {}, {}});
  layout->in = shardings_on(mesh, a.in_shardings);
  layout->out = shardings_on(mesh, a.out_shardings);
  return layout;
}

}  // namespace

struct Exported::State {
  Artifact artifact;
  std::vector<TreeDef> in_arg_defs;  // the input tree's children, for the per-call structure check
  TreeDef out_def;                   // the output tree, for rebuilding each call's results
  exporting::Signature sig;
  struct Entry {
    ir::Program program;  // specialised to one concrete signature
    RunOptions run;       // what + program key, computed once (the executable is cached by the runtime)
  };
  // std::mutex rather than absl::Mutex so that ThreadSanitizer sees it (as the jit and executable caches).
  mutable std::mutex mu;  // guards cache, hits, misses, vjp
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> cache;
  int64_t hits = 0;
  int64_t misses = 0;
  std::shared_ptr<State> vjp;  // created on the first vjp()
  // Sharded artifacts (nr_devices > 1): the layout on the first nr_devices devices, made on the first call.
  std::shared_ptr<const ShardedLayout> default_layout;
};

Exported::Exported(Artifact artifact) : Exported(std::move(artifact), /*validated=*/false) {}

Exported::Exported(Artifact artifact, bool validated) : state_(std::make_shared<State>()) {
  if (!validated) throw_if_error(exporting::validate(artifact));
  state_->artifact = std::move(artifact);
  state_->sig.fun_name = state_->artifact.fun_name;
  state_->sig.in_names = state_->artifact.in_names;
  state_->sig.in_avals = state_->artifact.in_avals;
  state_->sig.scope = &state_->artifact.program.scope;
  for (const TreeSpec& c : state_->artifact.in_tree.children) state_->in_arg_defs.push_back(detail::from_tree_spec(c));
  state_->out_def = detail::from_tree_spec(state_->artifact.out_tree);
}

const Artifact& Exported::artifact() const { return state_->artifact; }

std::string Exported::serialize() const { return value_or_throw(exporting::serialize(state_->artifact)); }

Exported Exported::deserialize(std::string_view bytes, const exporting::Limits& limits) {
  return Exported(value_or_throw(exporting::deserialize(bytes, limits)), /*validated=*/true);
}

Exported Exported::vjp() const {
  if (!state_->artifact.vjp) {
    throw InvalidArgument(cat("[Exported.vjp] '", fun_name(), "' was exported without a VJP (with_vjp = false, ",
                              "no floating inputs, or ops reverse mode does not differentiate, such as control flow)"));
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->vjp) state_->vjp = Exported(*state_->artifact.vjp, /*validated=*/true).state_;
  return Exported(state_->vjp);
}

namespace {

// The recorded specs over `mesh` (axis names positional), checked against the artifact's layout.
std::vector<std::optional<Sharding>> shardings_over(const Artifact& a, const Mesh& mesh,
                                                    const std::vector<exporting::ShardingSpec>& specs, const char* api) {
  if (mesh.size() != static_cast<int64_t>(a.nr_devices)) {
    throw InvalidArgument(cat("[", api, "] '", a.fun_name, "' was exported for ", a.nr_devices, " devices; the mesh ",
                              mesh.to_string(), " has ", mesh.size()));
  }
  for (const exporting::ShardingSpec& s : specs) {
    if (!s.unspecified && s.mesh_axis_sizes != mesh.axis_sizes()) {
      throw InvalidArgument(cat("[", api, "] '", a.fun_name, "' was exported with the mesh layout ", s.to_string(),
                                "; the mesh ", mesh.to_string(), " has other axis sizes"));
    }
  }
  return shardings_on(mesh, specs);
}

}  // namespace

std::vector<std::optional<Sharding>> Exported::in_shardings_jax(const Mesh& mesh) const {
  return shardings_over(state_->artifact, mesh, state_->artifact.in_shardings, "Exported.in_shardings_jax");
}

std::vector<std::optional<Sharding>> Exported::out_shardings_jax(const Mesh& mesh) const {
  return shardings_over(state_->artifact, mesh, state_->artifact.out_shardings, "Exported.out_shardings_jax");
}

ExportedCacheStats Exported::cache_stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return {static_cast<int64_t>(state_->cache.size()), state_->hits, state_->misses};
}

void Exported::check_in_tree(const std::vector<TreeDef>& defs) const {
  if (defs == state_->in_arg_defs && artifact().in_tree.kind == TreeSpec::Kind::kTuple) return;
  if (defs.size() != state_->in_arg_defs.size()) {
    throw InvalidArgument(cat("[Exported.call] '", fun_name(), "': expected ", state_->in_arg_defs.size(),
                              " arguments, found ", defs.size()));
  }
  TreeSpec got;
  got.kind = TreeSpec::Kind::kTuple;
  for (const TreeDef& d : defs) got.children.push_back(detail::to_tree_spec(d));
  throw InvalidArgument(cat("[Exported.call] '", fun_name(), "': the arguments have structure ", got.to_string(),
                            ", but the function was exported for ", artifact().in_tree.to_string()));
}

Tree Exported::unflatten_outputs(const std::vector<Array>& outs) const {
  return tree_unflatten<Tree>(out_def(), outs);
}

const TreeDef& Exported::out_def() const { return state_->out_def; }

std::shared_ptr<const ShardedLayout> Exported::sharded_layout(const std::vector<Array>& leaves) const {
  const Artifact& a = state_->artifact;
  if (device_count() < static_cast<int>(a.nr_devices)) {
    throw InvalidArgument(cat("[Exported.call] Function '", a.fun_name, "' was exported for ", a.nr_devices,
                              " devices and is called in a context with ", device_count(),
                              " devices, which is not allowed."));
  }
  const MeshAxes axes = recorded_axes(a);
  // An argument committed to a mesh with the recorded axes chooses the devices (e.g. across processes).
  for (const Array& x : leaves) {
    if (!x.valid() || !x.committed() || x.sharding().is_single_device()) continue;
    const Mesh& m = x.sharding().mesh();
    if (m.axes() == axes) {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->default_layout && state_->default_layout->mesh == m) return state_->default_layout;
      return layout_on(a, m);
    }
  }
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->default_layout) return state_->default_layout;
  }
  auto layout = layout_on(a, make_mesh(axes.sizes, axes.names));
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->default_layout) state_->default_layout = layout;
  return state_->default_layout;
}

std::vector<Array> Exported::call_flat(const std::vector<Array>& leaves) const {
  const Artifact& a = state_->artifact;
  const std::string api = "Exported.call";
  const std::string platform = default_platform();
  if (std::find(a.platforms.begin(), a.platforms.end(), platform) == a.platforms.end() &&
      !a.has_safety_check_disabled("platform")) {
    throw InvalidArgument(cat("[", api, "] Function '", a.fun_name, "' was exported for platforms '",
                              join(a.platforms, ", "), "' but it is used on '", platform, "'."));
  }
  std::shared_ptr<const ShardedLayout> layout;
  if (a.nr_devices != 1) layout = sharded_layout(leaves);
  // The cache key: per leaf its dtype, rank and dims, as raw bytes (cheap; no formatting).
  bool all_static = true;
  std::string key;
  key.reserve(leaves.size() * 24);
  for (const Array& x : leaves) {
    if (!x.valid()) throw InvalidArgument(cat("[", api, "] '", a.fun_name, "': an argument is an empty Array"));
    const AbstractValue& v = x.aval();
    key.push_back(static_cast<char>(v.dtype));
    key.push_back(static_cast<char>(v.rank()));
    for (const DimExpr& d : v.shape) {
      auto c = d.constant_value();
      if (!c) {
        all_static = false;
        break;
      }
      key.append(reinterpret_cast<const char*>(&*c), sizeof(int64_t));
    }
  }
  auto avals_of = [&] {
    std::vector<AbstractValue> avals;
    avals.reserve(leaves.size());
    for (const Array& x : leaves) avals.push_back(x.aval());
    return avals;
  };
  const bool tracing = in_trace();
  if (!all_static) {
    // A caller traced with symbolic shapes: solve symbolically and inline (never cached: the caller's
    // scope takes part in the shape rules).
    if (!tracing) throw InvalidArgument(cat("[", api, "] '", a.fun_name, "': symbolic arguments outside a trace"));
    auto env = value_or_throw(exporting::solve_dim_vars(state_->sig, avals_of()));
    // Shape rules of the instantiated program decide comparisons under the caller's constraints.
    ir::Program p = value_or_throw(exporting::substitute_dim_vars(a.program, env, detail::current_scope(), api));
    return call_program(p, leaves, "Exported.call");
  }
  std::shared_ptr<State::Entry> entry;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->cache.find(key);
    if (it != state_->cache.end()) {
      entry = it->second;
      ++state_->hits;
    }
  }
  if (!entry) {
    auto values = value_or_throw(exporting::solve_dim_values(state_->sig, avals_of()));
    auto fresh = std::make_shared<State::Entry>();
    if (values.empty()) {
      fresh->program = a.program;
    } else {
      auto p = ir::specialize(a.program, values);
      if (!p.ok()) throw_if_error(absl::InvalidArgumentError(cat("[", api, "] '", a.fun_name, "': ", p.status().message())));
      fresh->program = *std::move(p);
    }
    fresh->run.what = api;
    fresh->run.program_key = program_key(fresh->program);
    if (!a.donated_inputs.empty()) {  // the exported jit's donation: the call deletes those arguments
      fresh->run.donate.assign(a.in_avals.size(), false);
      for (int d : a.donated_inputs) fresh->run.donate[static_cast<size_t>(d)] = true;
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    ++state_->misses;
    entry = state_->cache.emplace(key, std::move(fresh)).first->second;
  }
  if (tracing) return call_program(entry->program, leaves, "Exported.call");
  std::vector<ArrayValue> args;
  args.reserve(leaves.size());
  for (const Array& x : leaves) args.push_back(x.value());
  std::vector<ArrayValue> outs;
  if (layout) {
    RunOptions run = entry->run;
    run.mesh = layout->mesh;
    run.in_shardings = layout->in;
    run.out_shardings = layout->out;
    outs = value_or_throw(run_program(entry->program, args, run));
  } else {
    outs = value_or_throw(run_program(entry->program, args, entry->run));
  }
  std::vector<Array> result;
  result.reserve(outs.size());
  for (ArrayValue& v : outs) result.emplace_back(std::move(v));
  return result;
}

std::vector<AbstractValue> symbolic_args_specs(const std::vector<Array>& args, const std::vector<std::string>& specs) {
  if (specs.size() != 1 && specs.size() != args.size()) {
    throw InvalidArgument(absl::StrCat("[symbolic_args_specs] expected one spec, or one per argument (", args.size(),
                                       "), found ", specs.size()));
  }
  std::vector<AbstractValue> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<std::optional<int64_t>> like;
    for (const DimExpr& d : args[i].shape()) like.push_back(d.constant_value());
    const std::string& spec = specs[specs.size() == 1 ? 0 : i];
    absl::StatusOr<Shape> shape = parse_shape_like(spec, like);
    if (!shape.ok()) {
      throw InvalidArgument(absl::StrCat("[symbolic_args_specs] argument ", i, " (", args[i].aval().to_string(),
                                         "): ", shape.status().message()));
    }
    out.push_back(AbstractValue{args[i].dtype(), *std::move(shape)});
  }
  return out;
}

}  // namespace mcx
