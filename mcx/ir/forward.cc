// Forward-mode autodiff (see forward.h). jvp_program replays f and emits each instruction's JVP rule right
// after it; linearize_programs partitions the jvp program into the part that does not read a tangent and
// the part that does.
#include "mcx/ir/forward.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/builder.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/control_flow_autodiff.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/jvp_rules.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/shard_map.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
namespace {

using internal::cat;

absl::Status check_unique(const std::vector<int>& wrt, std::string_view api) {
  std::set<int> seen;
  for (int p : wrt) {
    if (!seen.insert(p).second) {
      return absl::InvalidArgumentError(cat("[", api, "] parameter ", p, " appears twice in wrt"));
    }
  }
  return absl::OkStatus();
}

// The program that computes `outputs` (values of src) from `inputs` (values of src, which become its
// parameters in that order): the instructions that outputs and `effects` (instructions kept for their
// effect, passes.h EffectScan) need, stopping at the inputs. Throws Internal when an output needs a
// parameter of src that is not an input (a bug in the caller's partition).
Program extract(const Program& src, std::string name, const std::vector<ValueId>& inputs,
                const std::vector<ValueId>& outputs, const std::vector<ValueId>& effects) {
  ProgramBuilder b(std::move(name), src.scope);
  std::vector<ValueId> map(src.num_values(), -1);
  for (ValueId v : inputs) map[v] = b.add_parameter(src.type(v));
  std::vector<bool> needed(src.num_values(), false);
  std::vector<ValueId> stack(outputs.begin(), outputs.end());
  stack.insert(stack.end(), effects.begin(), effects.end());
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (needed[v] || map[v] >= 0) continue;
    if (src.is_param(v)) throw Internal(cat("[linearize_programs] %", v, " is needed but not an input of ", b.program().name));
    needed[v] = true;
    for (ValueId o : src.defining_instr(v).operands) stack.push_back(o);
  }
  for (size_t i = 0; i < src.instrs.size(); ++i) {
    const ValueId v = src.num_params() + static_cast<int>(i);
    if (!needed[v]) continue;
    const Instr& in = src.instrs[i];
    std::vector<ValueId> ops;
    for (ValueId o : in.operands) ops.push_back(map[o]);
    map[v] = b.emit_or_throw(in.kind, std::move(ops), in.attrs);
  }
  std::vector<ValueId> results;
  for (ValueId v : outputs) results.push_back(map[v]);
  return std::move(b).build(std::move(results));
}

}  // namespace

absl::StatusOr<Program> jvp_program(const Program& f, const std::vector<int>& wrt) {
  MCX_RETURN_IF_ERROR(internal::check_wrt(f, wrt, "jvp_program"));
  MCX_RETURN_IF_ERROR(check_unique(wrt, "jvp_program"));
  try {
    ProgramBuilder b(f.name + "_jvp", f.scope);
    std::vector<ValueId> map(f.num_values(), -1);
    std::vector<ValueId> tangent(f.num_values(), -1);
    for (int p = 0; p < f.num_params(); ++p) map[p] = b.add_parameter(f.params[p]);
    for (int p : wrt) tangent[p] = b.add_parameter(f.params[p]);
    // The tangents of an op with regions come from one JVP per sibling group (control_flow_autodiff.h,
    // custom_rules.h), emitted at its first sibling; the primal results keep coming from the op itself.
    const std::vector<int> group_first = sibling_group_firsts(f);
    std::map<int, std::vector<ValueId>> group_tangents;
    for (size_t i = 0; i < f.instrs.size(); ++i) {
      const Instr& in = f.instrs[i];
      const ValueId v = f.num_params() + static_cast<int>(i);
      std::vector<ValueId> ops;
      std::vector<ValueId> tangents;
      for (ValueId o : in.operands) {
        ops.push_back(map[o]);
        tangents.push_back(tangent[o]);
      }
      map[v] = b.emit_or_throw(in.kind, ops, in.attrs);
      const bool any_tangent = std::any_of(tangents.begin(), tangents.end(), [](ValueId t) { return t >= 0; });
      if (has_regions(in.kind) && any_tangent) {
        const int first = group_first[i];
        if (first == static_cast<int>(i)) {
          group_tangents[first] = in.kind == OpKind::kScan    ? internal::emit_scan_jvp(b, in, ops, tangents)
                                  : in.kind == OpKind::kWhile ? internal::emit_while_jvp(b, in, ops, tangents)
                                  : in.kind == OpKind::kCond  ? internal::emit_cond_jvp(b, in, ops, tangents)
                                  : in.kind == OpKind::kShardMap ? internal::emit_shard_map_jvp(b, in, ops, tangents)
                                                                 : internal::emit_custom_call_jvp(b, in, ops, tangents);
        }
        tangent[v] = group_tangents.at(first).at(result_index(in));
        continue;
      }
      tangent[v] = internal::emit_jvp_rule(b, in, ops, map[v], tangents);
    }
    std::vector<ValueId> results;
    for (ValueId r : f.results) results.push_back(map[r]);
    for (ValueId r : f.results) results.push_back(tangent[r] >= 0 ? tangent[r] : b.full_like(map[r], 0.0));
    return eliminate_common_subexpressions(eliminate_dead_code(std::move(b).build(std::move(results))));
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

absl::StatusOr<LinearizedPrograms> linearize_programs(const Program& f, const std::vector<int>& wrt) {
  MCX_ASSIGN_OR_RETURN(Program j, jvp_program(f, wrt));
  const int np = f.num_params();
  const int nt = static_cast<int>(wrt.size());
  const size_t m = f.results.size();
  // Which values read a tangent, and which read a primal parameter.
  std::vector<bool> reads_tangent(j.num_values(), false);
  std::vector<bool> reads_primal(j.num_values(), false);
  for (int p = 0; p < np; ++p) reads_primal[p] = true;
  for (int p = np; p < np + nt; ++p) reads_tangent[p] = true;
  for (size_t i = 0; i < j.instrs.size(); ++i) {
    const ValueId v = j.num_params() + static_cast<int>(i);
    for (ValueId o : j.instrs[i].operands) {
      reads_tangent[v] = reads_tangent[v] || reads_tangent[o];
      reads_primal[v] = reads_primal[v] || reads_primal[o];
    }
  }
  // Residuals: the tangent-free values the linear part reads that depend on a primal parameter (values
  // computed from constants alone are recomputed by the linear part).
  std::set<ValueId> residual_set;
  std::vector<bool> seen(j.num_values(), false);
  std::vector<ValueId> stack(j.results.begin() + static_cast<std::ptrdiff_t>(m), j.results.end());
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (seen[v]) continue;
    seen[v] = true;
    if (!reads_tangent[v]) {
      if (reads_primal[v]) residual_set.insert(v);
      continue;
    }
    if (j.is_param(v)) continue;
    for (ValueId o : j.defining_instr(v).operands) stack.push_back(o);
  }
  std::vector<ValueId> residuals(residual_set.begin(), residual_set.end());
  try {
    LinearizedPrograms out;
    std::vector<ValueId> primal_inputs;
    for (int p = 0; p < np; ++p) primal_inputs.push_back(p);
    std::vector<ValueId> primal_outputs(j.results.begin(), j.results.begin() + static_cast<std::ptrdiff_t>(m));
    primal_outputs.insert(primal_outputs.end(), residuals.begin(), residuals.end());
    // The primal part runs the prints (those that read primal values only; the tangent parts of loops print
    // nothing, drop_side_effects removed their prints).
    std::vector<ValueId> effects;
    EffectScan scan;
    for (size_t i = 0; i < j.instrs.size(); ++i) {
      const ValueId v = j.num_params() + static_cast<ValueId>(i);
      if (!reads_tangent[v] && scan.has_effects(j.instrs[i])) effects.push_back(v);
    }
    out.primal = extract(j, f.name + "_primal", primal_inputs, primal_outputs, effects);
    std::vector<ValueId> linear_inputs = residuals;
    for (int p = np; p < np + nt; ++p) linear_inputs.push_back(p);
    std::vector<ValueId> linear_outputs(j.results.begin() + static_cast<std::ptrdiff_t>(m), j.results.end());
    out.linear = extract(j, f.name + "_linear", linear_inputs, linear_outputs, {});
    out.num_residuals = static_cast<int>(residuals.size());
    return out;
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

}  // namespace mcx::ir
