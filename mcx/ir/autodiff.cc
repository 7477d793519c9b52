// Reverse-mode autodiff as a program transformation (see autodiff.h). The primal program is replayed into
// a new builder, then the instructions are walked backwards emitting each op's VJP rule (vjp_rules.h); the
// rules read forward values, recomputed ones inside remat regions (remat.h).
//
// Activity analysis keeps the backward pass minimal: a value is active when it is floating, depends on a
// wrt parameter through differentiable ops, and reaches a result. Only active values get cotangents and
// rules only emit contributions for active operands.
#include "mcx/ir/autodiff.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/control_flow_autodiff.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/passes.h"
#include "mcx/ir/remat.h"
#include "mcx/ir/shard_map.h"
#include "mcx/ir/str_util.h"
#include "mcx/ir/vjp_rules.h"

namespace mcx::ir {
namespace {

using internal::cat;

// Replays f's instructions into b with parameters bound to args; returns the id in b of every value of f.
// Throws mcx::Error when an instruction is rejected.
std::vector<ValueId> replay(ProgramBuilder& b, const Program& f, std::span<const ValueId> args) {
  std::vector<ValueId> map(f.num_values(), -1);
  for (int p = 0; p < f.num_params(); ++p) map[p] = args[p];
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    std::vector<ValueId> ops;
    ops.reserve(in.operands.size());
    for (ValueId v : in.operands) ops.push_back(map[v]);
    map[f.num_params() + i] = b.emit_or_throw(in.kind, std::move(ops), in.attrs);
  }
  return map;
}

struct VjpValues {
  std::vector<ValueId> primal_results;
  std::vector<ValueId> grads;
};

// Emits the primal and the backward pass of f into b. cts[j] (an id in b, or -1 for "zero") is the
// cotangent of result j. Throws mcx::Error.
VjpValues emit_vjp(ProgramBuilder& b, const Program& f, std::span<const ValueId> args,
                   std::span<const ValueId> cts, const std::vector<int>& wrt) {
  const int np = f.num_params();
  const int nv = f.num_values();

  // Forward: depends on a wrt parameter through differentiable ops, and is floating.
  std::vector<bool> fwd(nv, false);
  for (int p : wrt) fwd[p] = true;
  for (int i = 0; i < static_cast<int>(f.instrs.size()); ++i) {
    const Instr& in = f.instrs[i];
    if (!op_info(in.kind).differentiable || !is_floating(in.type.dtype)) continue;
    for (ValueId v : in.operands) fwd[np + i] = fwd[np + i] || fwd[v];
  }
  // Backward: reaches a floating result through active instructions.
  std::vector<bool> active(nv, false);
  for (ValueId r : f.results) active[r] = fwd[r];
  for (int i = static_cast<int>(f.instrs.size()) - 1; i >= 0; --i) {
    if (!active[np + i]) continue;
    for (ValueId v : f.instrs[i].operands) active[v] = active[v] || fwd[v];
  }

  // Sibling groups of ops with regions (control_flow.h): the first sibling of each, and whether any sibling
  // is active. An active scan is replayed with residuals (control_flow_autodiff.h), an active custom_vjp_call
  // by its fwd (custom_rules.h); each group is differentiated as a whole at its first sibling, when the
  // cotangents of all its siblings are complete.
  const std::vector<int> group_first = sibling_group_firsts(f);
  std::vector<bool> group_active(f.instrs.size(), false);
  for (size_t i = 0; i < f.instrs.size(); ++i)
    if (group_first[i] >= 0 && active[np + i]) group_active[group_first[i]] = true;
  std::vector<ValueId> map(nv, -1);
  for (int p = 0; p < np; ++p) map[p] = args[p];
  std::map<int, std::vector<ValueId>> group_forward;  // first sibling -> results then residuals, in b
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    const Instr& in = f.instrs[i];
    std::vector<ValueId> ops;
    ops.reserve(in.operands.size());
    for (ValueId v : in.operands) ops.push_back(map[v]);
    const int first = group_first[i];
    const bool replayed = in.kind == OpKind::kScan || in.kind == OpKind::kCustomVjpCall;
    if (replayed && group_active[first]) {  // first >= 0 for an op with regions
      if (first == static_cast<int>(i)) {
        group_forward[first] = in.kind == OpKind::kScan ? internal::emit_scan_with_residuals(b, in, ops)
                                                        : internal::emit_custom_vjp_forward(b, in, ops);
      }
      map[np + i] = group_forward.at(first).at(result_index(in));
      continue;
    }
    map[np + i] = b.emit_or_throw(in.kind, std::move(ops), in.attrs);
  }

  // Forward values the rules read; inside remat regions, recomputed copies (remat.h).
  internal::Recomputation recompute(b, f, map);
  std::vector<std::optional<ValueId>> ct(nv);
  auto accumulate = [&](ValueId v, ValueId contribution) {
    const AbstractValue& want = f.type(v);
    const AbstractValue got = b.type(contribution);  // a copy: emitting reallocates
    if (got.dtype != want.dtype) {
      throw Internal(cat("[vjp_program] cotangent of %", v, " has type ", got.to_string(), ", expected ",
                         want.to_string()));
    }
    if (got.shape != b.type(map[v]).shape) contribution = b.reshape(contribution, b.type(map[v]).shape);
    ct[v] = ct[v] ? b.binary(OpKind::kAdd, *ct[v], contribution) : contribution;
  };
  for (size_t j = 0; j < f.results.size(); ++j) {
    if (active[f.results[j]] && cts[j] >= 0) accumulate(f.results[j], cts[j]);
  }
  for (int i = static_cast<int>(f.instrs.size()) - 1; i >= 0; --i) {
    const ValueId v = np + i;
    const Instr& in = f.instrs[i];
    const bool grouped = in.kind == OpKind::kScan || in.kind == OpKind::kCond || is_custom_call(in.kind) ||
                         in.kind == OpKind::kShardMap;
    if (grouped && group_active[group_first[i]]) {  // group_first >= 0 for an op with regions
      if (group_first[i] != i) continue;  // the group is differentiated at its first sibling
      std::vector<ValueId> ops;
      std::vector<bool> needed;
      for (ValueId o : in.operands) {
        ops.push_back(recompute.primal(o));
        needed.push_back(active[o]);
      }
      // The replayed forward values in b (a cond's backward branches and a custom_jvp_call's transposed rule
      // recompute theirs).
      std::vector<ValueId> forward;
      if (auto it = group_forward.find(i); it != group_forward.end()) forward = it->second;
      std::vector<std::optional<ValueId>> result_cts(num_group_results(in));
      // Identical ops (same operands and attributes, e.g. one function called twice on the same values
      // without CSE) form one group whose result may appear more than once: their cotangents add up.
      for (int j = i; j < static_cast<int>(f.instrs.size()); ++j) {
        if (group_first[j] != i || !active[np + j] || !ct[np + j]) continue;
        std::optional<ValueId>& slot = result_cts[result_index(f.instrs[j])];
        slot = slot ? b.binary(OpKind::kAdd, *slot, *ct[np + j]) : *ct[np + j];
      }
      std::vector<ValueId> contributions =
          in.kind == OpKind::kScan       ? internal::emit_scan_vjp(b, in, ops, forward, result_cts, needed)
          : in.kind == OpKind::kCond     ? internal::emit_cond_vjp(b, in, ops, forward, result_cts, needed)
          : in.kind == OpKind::kShardMap ? internal::emit_shard_map_vjp(b, in, ops, result_cts, needed)
                                         : internal::emit_custom_call_vjp(b, in, ops, forward, result_cts, needed);
      for (size_t k = 0; k < in.operands.size(); ++k)
        if (contributions[k] >= 0 && needed[k]) accumulate(in.operands[k], contributions[k]);
      continue;
    }
    if (!active[v] || !ct[v]) continue;
    std::vector<ValueId> ops;
    std::vector<bool> needed;
    for (ValueId o : in.operands) {
      ops.push_back(recompute.primal(o));
      needed.push_back(active[o]);
    }
    std::vector<ValueId> contributions = internal::emit_vjp_rule(b, in, ops, recompute.primal(v), *ct[v], needed);
    for (size_t k = 0; k < in.operands.size() && k < contributions.size(); ++k) {
      if (contributions[k] >= 0 && needed[k]) accumulate(in.operands[k], contributions[k]);
    }
  }

  VjpValues out;
  for (ValueId r : f.results) out.primal_results.push_back(map[r]);
  for (int p : wrt) out.grads.push_back(ct[p] ? *ct[p] : b.full_like(args[p], 0.0));
  return out;
}

// (p..., whatever make_cotangents adds) -> (f's results..., gradients of wrt): the common body of
// vjp_program (cotangents are parameters) and value_and_grad_program (the cotangent is the constant 1).
absl::StatusOr<Program> build_gradient_program(
    const Program& f, std::string name, const std::vector<int>& wrt,
    const std::function<std::vector<ValueId>(ProgramBuilder&)>& make_cotangents) {
  try {
    ProgramBuilder b(std::move(name), f.scope);
    std::vector<ValueId> args;
    for (const AbstractValue& t : f.params) args.push_back(b.add_parameter(t));
    std::vector<ValueId> cts = make_cotangents(b);
    VjpValues v = emit_vjp(b, f, args, cts, wrt);
    std::vector<ValueId> results = v.primal_results;
    results.insert(results.end(), v.grads.begin(), v.grads.end());
    Program g = std::move(b).build(std::move(results));
    // Rules that ignore an operand still asked for its recomputed copy: drop the copies nothing reads.
    return count_remat_regions(f) > 0 ? eliminate_dead_code(g) : g;
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

}  // namespace

namespace internal {

absl::Status check_wrt(const Program& f, const std::vector<int>& wrt, std::string_view api) {
  for (int p : wrt) {
    if (p < 0 || p >= f.num_params()) {
      return absl::InvalidArgumentError(cat("[", api, "] wrt index ", p, " is out of range: program '", f.name,
                                            "' has ", f.num_params(), " parameters"));
    }
    if (!is_floating(f.params[p].dtype)) {
      return absl::InvalidArgumentError(cat("[", api, "] parameter ", p, " of program '", f.name, "' is ",
                                            f.params[p].to_string(),
                                            "; gradients need a floating parameter (f16, bf16, f32 or f64)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Program> vjp_program(const Program& f, const std::vector<int>& wrt) {
  MCX_RETURN_IF_ERROR(internal::check_wrt(f, wrt, "vjp_program"));
  return build_gradient_program(f, f.name + "_vjp", wrt, [&f](ProgramBuilder& b) {
    std::vector<ValueId> cts;
    for (ValueId r : f.results) cts.push_back(b.add_parameter(f.type(r)));
    return cts;
  });
}

absl::StatusOr<Program> value_and_grad_program(const Program& f, const std::vector<int>& wrt) {
  if (f.results.size() != 1) {
    return absl::InvalidArgumentError(cat("[value_and_grad_program] program '", f.name,
                                          "' must have exactly one result, found ", f.results.size()));
  }
  const AbstractValue& rt = f.type(f.results[0]);
  if (rt.rank() != 0 || !is_floating(rt.dtype)) {
    return absl::InvalidArgumentError(cat("[value_and_grad_program] the result of program '", f.name,
                                          "' must be a floating scalar, found ", rt.to_string()));
  }
  MCX_RETURN_IF_ERROR(internal::check_wrt(f, wrt, "value_and_grad_program"));
  return build_gradient_program(f, f.name + "_value_and_grad", wrt, [&rt](ProgramBuilder& b) {
    return std::vector<ValueId>{b.scalar_constant(rt.dtype, 1.0)};
  });
}

absl::StatusOr<std::vector<ValueId>> inline_program(ProgramBuilder& b, const Program& callee,
                                                    std::span<const ValueId> args) {
  if (static_cast<int>(args.size()) != callee.num_params()) {
    return absl::InvalidArgumentError(cat("[inline_program] program '", callee.name, "' takes ",
                                          callee.num_params(), " arguments, got ", args.size()));
  }
  for (int p = 0; p < callee.num_params(); ++p) {
    if (args[p] < 0 || args[p] >= b.num_values()) {
      return absl::InvalidArgumentError(cat("[inline_program] argument ", p, " is %", args[p],
                                            ", not a value of the builder (", b.num_values(), " values)"));
    }
    const AbstractValue& got = b.type(args[p]);
    const AbstractValue& want = callee.params[p];
    bool same = got.dtype == want.dtype && got.rank() == want.rank();
    for (int d = 0; same && d < got.rank(); ++d) {
      same = b.scope().known_equal(got.shape[d], want.shape[d]);
    }
    if (!same) {
      return absl::InvalidArgumentError(cat("[inline_program] argument ", p, " of program '", callee.name,
                                            "' has type ", got.to_string(), ", expected ", want.to_string()));
    }
  }
  try {
    std::vector<ValueId> map = replay(b, callee, args);
    std::vector<ValueId> results;
    for (ValueId r : callee.results) results.push_back(map[r]);
    return results;
  } catch (const std::exception& e) {
    return status_from_exception(e);
  }
}

}  // namespace mcx::ir
