#include "mcx/trace/dispatch.h"

#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "mcx/ir/remat.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/runtime/executable_cache.h"
#include "mcx/runtime/program_runner.h"
#include "mcx/trace/trace_state.h"

namespace mcx {
namespace {

// Which single-op programs eager dispatch has run (the executables themselves live in the runtime's
// caches); kept for eager_cache_stats().
class EagerKeys {
 public:
  void note(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (keys_.insert(key).second) {
      ++misses_;
    } else {
      ++hits_;
    }
  }
  EagerCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(keys_.size()), hits_, misses_};
  }

 private:
  std::mutex mu_;
  absl::flat_hash_set<std::string> keys_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

EagerKeys& eager_cache() {
  static EagerKeys* keys = new EagerKeys();  // never destroyed: used until process exit
  return *keys;
}

}  // namespace

Array bind(ir::OpKind kind, std::vector<Array> operands, ir::Attrs attrs) {
  const std::string api_name(ir::op_name(kind));
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].valid()) {
      throw InvalidArgument(absl::StrCat("[", api_name, "] operand ", i, " is an empty Array"));
    }
  }
  if (detail::TraceContext* top = detail::current_trace()) {
    return top->record(kind, operands, std::move(attrs));
  }
  for (const Array& a : operands) detail::check_tracer_usable(a, api_name.c_str());
  if (kind == ir::OpKind::kConstant) return Array(value_or_throw(attrs.get_buffer("value")));

  ir::Program p;
  p.name = api_name;
  std::vector<ArrayValue> args;
  args.reserve(operands.size());
  ir::Instr instr{kind, {}, std::move(attrs), {}};
  for (const Array& a : operands) {
    instr.operands.push_back(static_cast<ir::ValueId>(p.params.size()));
    p.params.push_back(a.aval());
    args.push_back(a.value());
  }
  instr.type = value_or_throw(ir::infer_type(kind, p.params, instr.attrs, p.scope));
  p.instrs.push_back(std::move(instr));
  p.results.push_back(static_cast<ir::ValueId>(p.params.size()));
  RunOptions options;
  options.what = api_name;
  options.program_key = program_key(p);
  eager_cache().note(options.program_key);
  std::vector<ArrayValue> outs = value_or_throw(run_program(p, args, options));
  return Array(std::move(outs.front()));
}

std::vector<Array> call_program(const ir::Program& program, const std::vector<Array>& args, const char* api,
                                const std::optional<Mesh>& mesh) {
  if (args.size() != program.params.size()) {
    throw InvalidArgument(absl::StrCat("[", api, "] expected ", program.params.size(), " arguments, found ",
                                       args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].valid()) throw InvalidArgument(absl::StrCat("[", api, "] argument ", i, " is an empty Array"));
    if (args[i].aval() != program.params[i]) {
      throw InvalidArgument(absl::StrCat("[", api, "] argument ", i, ": expected ",
                                         program.params[i].to_string(), ", found ", args[i].aval().to_string()));
    }
  }
  if (detail::TraceContext* top = detail::current_trace()) {
    // Inline: replay the instructions into the enclosing trace, its remat regions renumbered apart from
    // the trace's own.
    const int64_t regions = ir::count_remat_regions(program);
    const ir::Program renumbered =
        regions > 0 ? ir::renumber_remat_regions(program, top->new_remat_regions(regions)) : ir::Program{};
    const ir::Program& inlined = regions > 0 ? renumbered : program;
    std::vector<int32_t> nodes;
    nodes.reserve(program.num_values());
    for (const Array& a : args) nodes.push_back(top->node_of(a, api));
    for (const ir::Instr& in : inlined.instrs) {
      std::vector<int32_t> ops;
      ops.reserve(in.operands.size());
      for (ir::ValueId v : in.operands) ops.push_back(nodes[v]);
      nodes.push_back(top->record_node(in.kind, std::move(ops), in.attrs, in.type));
    }
    std::vector<Array> outs;
    for (ir::ValueId r : program.results) outs.push_back(top->tracer(nodes[r]));
    if (mesh) detail::note_trace_mesh(*mesh, api);
    return outs;
  }
  std::vector<ArrayValue> values;
  values.reserve(args.size());
  for (const Array& a : args) {
    detail::check_tracer_usable(a, api);
    values.push_back(a.value());
  }
  RunOptions options;
  options.what = api;
  options.mesh = mesh;
  std::vector<ArrayValue> outs = value_or_throw(run_program(program, values, options));
  std::vector<Array> result;
  result.reserve(outs.size());
  for (ArrayValue& v : outs) result.emplace_back(std::move(v));
  return result;
}

bool in_trace() { return detail::current_trace() != nullptr; }

EagerCacheStats eager_cache_stats() { return eager_cache().stats(); }

Array with_weak_type(const Array& a, bool weak) {
  if (a.weak_type() == weak) return a;
  auto impl = std::make_shared<detail::ArrayImpl>(*a.impl());
  impl->weak = weak;
  if (!weak) impl->literal.reset();
  return Array(std::shared_ptr<const detail::ArrayImpl>(std::move(impl)));
}

}  // namespace mcx
