#include "mcx/trace/jit.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include <mutex>

#include "mcx/runtime/executable_cache.h"
#include "mcx/trace/trace_state.h"
#include "mcx/ir/passes.h"

namespace mcx {
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
  for (const Array& leaf : flat.leaves) {
    if (leaf.valid()) check_tracer_usable(leaf, "jit");
  }
  auto entry = std::make_shared<Entry>();
  TracedFunction traced = trace_flat(what, options_.name, flat.avals, flat.weak, SymbolicScope(),
                                     [&](std::span<const Array> tracers) {
                                       return trace_body(tracers, entry->out_tree);
                                     });
  if (!traced.captured.empty()) {
    throw Internal(absl::StrCat("[jit] ", what, " captured tracers of an enclosing trace at top level"));
  }
  entry->out_weak = std::move(traced.out_weak);
  entry->program = options_.optimize ? optimize_program(traced.program) : std::move(traced.program);
  entry->executable = value_or_throw(ExecutableCache::global().get_or_compile(entry->program));

  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->misses;
  auto [it, inserted] = impl_->entries.emplace(flat.key, std::move(entry));
  return it->second;
}

std::vector<Array> JitState::execute(const Entry& entry, const std::vector<Array>& leaves) const {
  std::vector<ArrayValue> args;
  args.reserve(leaves.size());
  for (const Array& leaf : leaves) {
    check_tracer_usable(leaf, "jit");
    args.push_back(leaf.value());
  }
  const auto& exe = *static_cast<const cpu::CpuExecutable*>(entry.executable.get());
  std::vector<ArrayValue> outs = value_or_throw(mcx::execute(exe, args));
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
