#include "mcx/ir/custom_rules.h"

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/batching_rules.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/control_flow_autodiff.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
namespace {

// operands[first, first + count) appended to `head`.
std::vector<ValueId> with_slice(std::vector<ValueId> head, std::span<const ValueId> operands, int64_t first,
                                int64_t count) {
  head.insert(head.end(), operands.begin() + first, operands.begin() + first + count);
  return head;
}

std::vector<ValueId> args_of(std::span<const ValueId> operands, int num_args) {
  return std::vector<ValueId>(operands.begin(), operands.begin() + num_args);
}

// The first operand of region `region` among the constants (the args come first).
int64_t consts_start(int num_args, const std::vector<int64_t>& region_consts, size_t region) {
  int64_t at = num_args;
  for (size_t r = 0; r < region; ++r) at += region_consts[r];
  return at;
}

// Refuses a cotangent or tangent wanted for a constant (an operand after the args): the rule gives none.
void check_constants_not_differentiated(const Instr& instr, int num_args, const std::vector<int64_t>& region_consts,
                                        const std::vector<bool>& differentiated, std::string_view mode) {
  static constexpr const char* kVjpNames[] = {"fun", "fwd", "bwd"};
  static constexpr const char* kJvpNames[] = {"fun", "jvp"};
  const bool vjp = instr.kind == OpKind::kCustomVjpCall;
  const char* api = vjp ? "custom_vjp" : "custom_jvp";
  for (size_t r = 0; r < region_consts.size(); ++r) {
    const int64_t first = consts_start(num_args, region_consts, r);
    for (int64_t k = first; k < first + region_consts[r]; ++k) {
      if (k >= static_cast<int64_t>(differentiated.size()) || !differentiated[k]) continue;
      throw InvalidArgument(cat("[", api, "] ", vjp ? kVjpNames[r] : kJvpNames[r], " closes over an array (its ",
                                "constant ", k - first, ") that is being differentiated in ", mode, " mode; a custom ",
                                "rule gives no derivative for it: pass it to the function as an argument instead"));
    }
  }
}

}  // namespace

absl::StatusOr<Program> inline_custom_calls(const Program& program) {
  try {
    ProgramBuilder b(program.name, program.scope);
    std::vector<ValueId> map(program.num_values(), -1);
    for (int p = 0; p < program.num_params(); ++p) map[p] = b.add_parameter(program.params[p]);
    const std::vector<int> group_first = sibling_group_firsts(program);
    std::map<int, std::vector<ValueId>> groups;  // first sibling -> the inlined fun's results
    for (size_t i = 0; i < program.instrs.size(); ++i) {
      const Instr& in = program.instrs[i];
      const ValueId v = program.num_params() + static_cast<int>(i);
      std::vector<ValueId> ops;
      for (ValueId o : in.operands) ops.push_back(map[o]);
      if (!is_custom_call(in.kind)) {
        map[v] = b.emit_or_throw(in.kind, std::move(ops), in.attrs);
        continue;
      }
      const int first = group_first[i];
      if (first == static_cast<int>(i)) {
        const CustomCallParts c = value_or_throw(get_custom_call_parts(in.kind, in.attrs, ops.size()));
        groups[first] = value_or_throw(inline_program(
            b, *c.regions[0], with_slice(args_of(ops, c.num_args), ops, c.num_args, c.region_consts[0])));
      }
      map[v] = groups.at(first).at(result_index(in));
    }
    std::vector<ValueId> results;
    for (ValueId r : program.results) results.push_back(map[r]);
    return std::move(b).build(std::move(results));
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

namespace internal {
namespace {

std::vector<ValueId> custom_vjp_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                    std::span<const ValueId> forward,
                                    std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed) {
  const CustomVjpConfig c = value_or_throw(get_custom_vjp_config(instr.attrs, operands.size()));
  check_constants_not_differentiated(instr, c.num_args, c.region_consts, needed, "reverse");
  const int m = c.num_outs(), r = c.num_residuals();
  std::vector<ValueId> bwd_args(forward.begin() + m, forward.begin() + m + r);  // the residuals
  for (int j = 0; j < m; ++j) bwd_args.push_back(result_cts[j] ? *result_cts[j] : b.full_like(forward[j], 0.0));
  bwd_args = with_slice(std::move(bwd_args), operands, consts_start(c.num_args, c.region_consts, 2), c.region_consts[2]);
  const std::vector<ValueId> arg_cts = value_or_throw(inline_program(b, *c.bwd, bwd_args));
  std::vector<ValueId> out(operands.size(), -1);
  for (int i = 0; i < c.num_args; ++i)
    if (needed[i] && is_floating(b.type(operands[i]).dtype)) out[i] = arg_cts[i];
  return out;
}

// The transpose of jvp's tangent map: vjp_program of (args, tangents, consts) -> out tangents with respect
// to the floating tangents, at zero tangents (any value would do: the map is linear in them).
std::vector<ValueId> custom_jvp_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                    std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed) {
  const CustomJvpConfig c = value_or_throw(get_custom_jvp_config(instr.attrs, operands.size()));
  check_constants_not_differentiated(instr, c.num_args, c.region_consts, needed, "reverse");
  const int n = c.num_args, m = c.num_outs();
  Program tangent_map = *c.jvp;
  tangent_map.results.erase(tangent_map.results.begin(), tangent_map.results.begin() + m);
  const std::vector<int> wrt = floating_params(tangent_map, n, n);
  const Program transposed = value_or_throw(vjp_program(tangent_map, wrt));
  std::vector<ValueId> args = args_of(operands, n);
  for (int i = 0; i < n; ++i) args.push_back(b.full_like(operands[i], 0.0));
  args = with_slice(std::move(args), operands, consts_start(n, c.region_consts, 1), c.region_consts[1]);
  const std::vector<AbstractValue> out_types = c.fun->result_types();
  for (int j = 0; j < m; ++j) args.push_back(result_cts[j] ? *result_cts[j] : zeros_of(b, out_types[j]));
  const std::vector<ValueId> v = value_or_throw(inline_program(b, transposed, args));
  std::vector<ValueId> out(operands.size(), -1);
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int arg = wrt[k] - n;
    if (needed[arg]) out[arg] = v[m + k];  // the gradients follow the m tangent outputs
  }
  return out;
}

}  // namespace

std::vector<ValueId> emit_custom_vjp_forward(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands) {
  const CustomVjpConfig c = value_or_throw(get_custom_vjp_config(instr.attrs, operands.size()));
  return value_or_throw(inline_program(
      b, *c.fwd,
      with_slice(args_of(operands, c.num_args), operands, consts_start(c.num_args, c.region_consts, 1),
                 c.region_consts[1])));
}

std::vector<ValueId> emit_custom_call_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                          std::span<const ValueId> forward,
                                          std::span<const std::optional<ValueId>> result_cts,
                                          const std::vector<bool>& needed) {
  if (instr.kind == OpKind::kCustomVjpCall) return custom_vjp_vjp(b, instr, operands, forward, result_cts, needed);
  return custom_jvp_vjp(b, instr, operands, result_cts, needed);
}

std::vector<ValueId> emit_custom_call_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                         std::span<const ValueId> tangents) {
  if (instr.kind != OpKind::kCustomJvpCall) throw Unimplemented(control_flow_autodiff_error(instr.kind, "forward"));
  const CustomJvpConfig c = value_or_throw(get_custom_jvp_config(instr.attrs, operands.size()));
  std::vector<bool> has_tangent;
  for (ValueId t : tangents) has_tangent.push_back(t >= 0);
  check_constants_not_differentiated(instr, c.num_args, c.region_consts, has_tangent, "forward");
  const int n = c.num_args, m = c.num_outs();
  std::vector<ValueId> args = args_of(operands, n);
  for (int i = 0; i < n; ++i) args.push_back(tangents[i] >= 0 ? tangents[i] : b.full_like(operands[i], 0.0));
  args = with_slice(std::move(args), operands, consts_start(n, c.region_consts, 1), c.region_consts[1]);
  const std::vector<ValueId> v = value_or_throw(inline_program(b, *c.jvp, args));
  std::vector<ValueId> out;
  for (int j = 0; j < m; ++j) out.push_back(is_floating(b.type(v[m + j]).dtype) ? v[m + j] : -1);
  return out;
}

std::vector<ValueId> emit_custom_call_batching(ProgramBuilder& b, const Instr& instr,
                                               std::span<const ValueId> operands, const std::vector<bool>& batched,
                                               const DimExpr& size) {
  const CustomCallParts parts = value_or_throw(get_custom_call_parts(instr.kind, instr.attrs, operands.size()));
  const Regions& regions = parts.regions;
  const int n = parts.num_args;
  const std::vector<int64_t>& consts = parts.region_consts;
  std::vector<ValueId> ops;
  for (int i = 0; i < n; ++i) ops.push_back(batched[i] ? operands[i] : broadcast_batch(b, operands[i], size));
  ops.insert(ops.end(), operands.begin() + n, operands.end());
  // Per region: how many leading parameters are batched values (args, tangents, residuals, cotangents: all
  // batched), then its constants' own batching.
  std::vector<int64_t> leading;
  const int m = static_cast<int>(regions[0]->results.size());
  if (instr.kind == OpKind::kCustomVjpCall) {
    const int r = static_cast<int>(regions[1]->results.size()) - m;
    leading = {n, n, r + m};
  } else {
    leading = {n, 2 * n};
  }
  Regions vmapped;
  for (size_t k = 0; k < regions.size(); ++k) {
    std::vector<bool> flags(leading[k], true);
    const int64_t first = consts_start(n, consts, k);
    for (int64_t j = first; j < first + consts[k]; ++j) flags.push_back(batched[j]);
    vmapped.push_back(std::make_shared<const Program>(value_or_throw(vmap_program(*regions[k], flags, size))));
  }
  Attrs attrs = instr.attrs;
  attrs.set("regions", std::move(vmapped));
  return emit_siblings(b, instr.kind, attrs, ops, m);
}

}  // namespace internal
}  // namespace mcx::ir
