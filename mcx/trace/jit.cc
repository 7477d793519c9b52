#include "mcx/trace/jit.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include <mutex>

#include "mcx/core/profiler.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/trace/trace_state.h"
#include "mcx/ir/passes.h"

namespace mcx {

std::string ShapeResult::to_string() const {
  if (leaves.size() == 1 && tree.kind() == TreeDef::Kind::kLeaf) return leaves[0].to_string();
  std::string out = "(";
  for (size_t i = 0; i < leaves.size(); ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", leaves[i].to_string());
  return out + ")";
}
namespace detail {

// std::mutex, not absl::Mutex: Debian's abseil lacks TSAN annotations (see executable_cache.h).
struct JitState::Impl {
  mutable std::mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<const Entry>> entries;  // guarded by mu
  int64_t hits = 0;                                                         // guarded by mu
  int64_t misses = 0;                                                       // guarded by mu
};

std::shared_ptr<JitState::Impl> JitState::make_impl() { return std::make_shared<Impl>(); }

namespace {

// CSE then DCE. (Constant folding is left to a later issue: it needs an evaluator from the backend and
// most constants of traced programs are small literals that the fused kernels handle anyway.)
ir::Program optimize_program(const ir::Program& p) {
  return ir::eliminate_dead_code(ir::eliminate_common_subexpressions(p));
}

}  // namespace

std::shared_ptr<const JitState::Entry> JitState::get_or_trace(
    const FlatArgs& flat, const std::function<std::vector<Array>(std::span<const Array>, TreeDef&)>& trace_body) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->entries.find(flat.key);
    if (it != impl_->entries.end()) {
      ++impl_->hits;
      return it->second;
    }
  }
  const std::string what = absl::StrCat("jit of '", options_.name, "'");
  profiler::Scope traced_scope("compile", "trace ", options_.name);
  for (const Array& leaf : flat.leaves) {
    if (leaf.valid()) check_tracer_usable(leaf, "jit");
  }
  auto entry = std::make_shared<Entry>();
  TracedFunction traced = trace_flat(what, options_.name, flat.avals, flat.weak, SymbolicScope(),
                                     [&](std::span<const Array> tracers) {
                                       return trace_body(tracers, entry->out_tree);
                                     },
                                     argument_leaf_names(flat));
  if (!traced.captured.empty()) {
    throw Internal(absl::StrCat("[jit] ", what, " captured tracers of an enclosing trace at top level"));
  }
  entry->out_weak = std::move(traced.out_weak);
  entry->program = options_.optimize ? optimize_program(traced.program) : std::move(traced.program);
  entry->run_options = run_options_for(what, flat, entry->program, traced.mesh);
  entry->run_options.program_key = program_key(entry->program);
  traced_scope.arg("instructions", static_cast<int64_t>(entry->program.instrs.size()));

  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->misses;
  auto [it, inserted] = impl_->entries.emplace(flat.key, std::move(entry));
  return it->second;
}

RunOptions JitState::run_options_for(const std::string& what, const FlatArgs& flat, const ir::Program& program,
                                     const std::optional<Mesh>& mesh) const {
  RunOptions run;
  run.what = what;
  run.mesh = mesh;
  const size_t num_args = flat.ranges.size();
  if (!options_.in_shardings.empty()) {
    if (options_.in_shardings.size() != num_args) {
      throw InvalidArgument(absl::StrCat("[jit] ", what, " has ", options_.in_shardings.size(),
                                         " in_shardings but was called with ", num_args, " arguments"));
    }
    run.in_shardings.resize(flat.leaves.size());
    for (size_t a = 0; a < num_args; ++a) {
      for (size_t i = flat.ranges[a].first; i < flat.ranges[a].second; ++i) run.in_shardings[i] = options_.in_shardings[a];
    }
  }
  const size_t n_out = program.results.size();
  if (options_.out_shardings.size() == 1) {
    run.out_shardings.assign(n_out, options_.out_shardings.front());
  } else if (!options_.out_shardings.empty()) {
    if (options_.out_shardings.size() != n_out) {
      throw InvalidArgument(absl::StrCat("[jit] ", what, " returns ", n_out, " arrays but has ",
                                         options_.out_shardings.size(), " out_shardings (expected 1 or ", n_out, ")"));
    }
    run.out_shardings = options_.out_shardings;
  }
  if (!options_.donate_argnums.empty()) {
    run.donate.assign(flat.leaves.size(), false);
    for (int a : options_.donate_argnums) {
      if (a < 0 || static_cast<size_t>(a) >= num_args) {
        throw InvalidArgument(absl::StrCat("[jit] ", what, " donate_argnums has ", a, " but the function was called with ",
                                           num_args, " arguments"));
      }
      for (size_t i = flat.ranges[a].first; i < flat.ranges[a].second; ++i) run.donate[i] = true;
    }
  }
  return run;
}

std::vector<Array> JitState::execute(const Entry& entry, const FlatArgs& flat) const {
  std::vector<ArrayValue> args;
  args.reserve(flat.leaves.size());
  for (const Array& leaf : flat.leaves) {
    check_tracer_usable(leaf, "jit");
    args.push_back(leaf.value());
  }
  std::vector<ArrayValue> outs = value_or_throw(run_program(entry.program, args, entry.run_options));
  std::vector<Array> result;
  result.reserve(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    Array a(std::move(outs[i]));
    result.push_back(entry.out_weak[i] ? with_weak_type(a, true) : a);
  }
  return result;
}

JitCacheStats JitState::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {static_cast<int64_t>(impl_->entries.size()), impl_->hits, impl_->misses};
}

void JitState::clear() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->entries.clear();
}

}  // namespace detail
}  // namespace mcx
