#include "mcx/ir/control_flow.h"

#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/shard_map.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::cat;
using internal::op_error;
using internal::with_op_prefix;
namespace {

absl::StatusOr<int64_t> get_int(OpKind kind, const Attrs& attrs, std::string_view name) {
  auto v = attrs.get_int(name);
  if (!v.ok()) return with_op_prefix(op_name(kind), v.status());
  return *v;
}

absl::StatusOr<Regions> get_regions(OpKind kind, const Attrs& attrs, size_t expected) {
  auto v = attrs.get_regions("regions");
  if (!v.ok()) return with_op_prefix(op_name(kind), v.status());
  if (expected > 0 && v->size() != expected)
    return op_error(op_name(kind), "attribute 'regions' holds ", v->size(), " programs, expected ", expected);
  if (v->empty()) return op_error(op_name(kind), "attribute 'regions' is empty, expected at least one branch");
  for (size_t i = 0; i < v->size(); ++i)
    if ((*v)[i] == nullptr) return op_error(op_name(kind), "region ", i, " is null");
  return *std::move(v);
}

// A count attribute in [0, limit].
absl::StatusOr<int> get_count(OpKind kind, const Attrs& attrs, std::string_view name, int64_t limit) {
  MCX_ASSIGN_OR_RETURN(int64_t v, get_int(kind, attrs, name));
  if (v < 0 || v > limit)
    return op_error(op_name(kind), "attribute '", name, "' is ", v, ", expected a count in [0, ", limit, "]");
  return static_cast<int>(v);
}

std::string types_str(std::span<const AbstractValue> types) {
  std::string out = "(";
  for (size_t i = 0; i < types.size(); ++i) out += cat(i ? ", " : "", types[i].to_string());
  return out + ")";
}

// The region's parameters are exactly `params`. Only its signature is checked here (a shape rule runs for
// every sibling; re-verifying nested bodies per sibling would cost exponential time in the nesting): verify()
// checks each distinct region's body once.
absl::Status check_region(OpKind kind, const Program& region, std::string_view what,
                          std::span<const AbstractValue> params) {
  if (region.params.size() != params.size())
    return op_error(op_name(kind), what, " takes ", region.params.size(), " parameters ",
                    types_str(region.params), ", expected ", params.size(), " ", types_str(params));
  for (size_t i = 0; i < params.size(); ++i)
    if (region.params[i] != params[i])
      return op_error(op_name(kind), what, " parameter ", i, " is ", region.params[i].to_string(), ", expected ",
                      params[i].to_string());
  for (size_t i = 0; i < region.results.size(); ++i)
    if (region.results[i] < 0 || region.results[i] >= region.num_values())
      return op_error(op_name(kind), what, " result ", i, " refers to %", region.results[i], ", but it has ",
                      region.num_values(), " values");
  return absl::OkStatus();
}

std::vector<AbstractValue> concat_types(std::span<const AbstractValue> a, std::span<const AbstractValue> b) {
  std::vector<AbstractValue> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

absl::StatusOr<std::vector<AbstractValue>> while_types(std::span<const AbstractValue> ops, const Attrs& attrs) {
  constexpr OpKind k = OpKind::kWhile;
  MCX_ASSIGN_OR_RETURN(WhileConfig c, get_while_config(attrs, ops.size()));
  auto carries = ops.subspan(0, c.num_carry);
  auto cond_consts = ops.subspan(c.num_carry, c.num_cond_consts);
  auto body_consts = ops.subspan(c.num_carry + c.num_cond_consts);
  MCX_RETURN_IF_ERROR(check_region(k, *c.cond, "cond", concat_types(carries, cond_consts)));
  MCX_RETURN_IF_ERROR(check_region(k, *c.body, "body", concat_types(carries, body_consts)));
  const std::vector<AbstractValue> pred = c.cond->result_types();
  if (pred.size() != 1 || pred[0] != AbstractValue{DType::kBool, {}})
    return op_error(op_name(k), "cond must return one bool[], found ", types_str(pred));
  const std::vector<AbstractValue> out = c.body->result_types();
  if (out.size() != carries.size())
    return op_error(op_name(k), "body returns ", out.size(), " values, expected the ", carries.size(), " carries");
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != carries[i])
      return op_error(op_name(k), "carry ", i, ": body returns ", out[i].to_string(), ", the loop carries ",
                      carries[i].to_string());
  return out;
}

absl::StatusOr<std::vector<AbstractValue>> scan_types(std::span<const AbstractValue> ops, const Attrs& attrs,
                                                      const SymbolicScope& scope) {
  constexpr OpKind k = OpKind::kScan;
  MCX_ASSIGN_OR_RETURN(ScanConfig c, get_scan_config(attrs, ops.size()));
  auto carries = ops.subspan(0, c.num_carry);
  std::vector<AbstractValue> params(carries.begin(), carries.end());
  const DimExpr length(c.length);
  for (int i = 0; i < c.num_xs; ++i) {
    const AbstractValue& x = ops[c.num_carry + i];
    if (x.rank() < 1 || !(x.shape[0] == length || scope.known_equal(x.shape[0], length)))
      return op_error(op_name(k), "xs ", i, " is ", x.to_string(), ", expected a leading dimension of the length ",
                      c.length);
    params.push_back(AbstractValue{x.dtype, Shape(x.shape.begin() + 1, x.shape.end())});
  }
  for (size_t i = c.num_carry + c.num_xs; i < ops.size(); ++i) params.push_back(ops[i]);
  MCX_RETURN_IF_ERROR(check_region(k, *c.body, "body", params));
  const std::vector<AbstractValue> out = c.body->result_types();
  if (static_cast<int>(out.size()) < c.num_carry)
    return op_error(op_name(k), "body returns ", out.size(), " values, expected the ", c.num_carry,
                    " carries first");
  std::vector<AbstractValue> results;
  for (int i = 0; i < c.num_carry; ++i) {
    if (out[i] != carries[i])
      return op_error(op_name(k), "carry ", i, ": body returns ", out[i].to_string(), ", the loop carries ",
                      carries[i].to_string());
    results.push_back(out[i]);
  }
  for (size_t i = c.num_carry; i < out.size(); ++i) {
    Shape stacked{length};
    stacked.insert(stacked.end(), out[i].shape.begin(), out[i].shape.end());
    results.push_back(AbstractValue{out[i].dtype, std::move(stacked)});
  }
  return results;
}

absl::StatusOr<std::vector<AbstractValue>> cond_types(std::span<const AbstractValue> ops, const Attrs& attrs) {
  constexpr OpKind k = OpKind::kCond;
  MCX_ASSIGN_OR_RETURN(CondConfig c, get_cond_config(attrs, ops.size()));
  if (ops[0] != AbstractValue{DType::kInt32, {}})
    return op_error(op_name(k), "the branch index must be i32[], found ", ops[0].to_string());
  const int n = c.num_operands(ops.size());
  auto shared = ops.subspan(1, n);
  size_t next = 1 + n;
  std::vector<AbstractValue> results;
  for (size_t b = 0; b < c.branches.size(); ++b) {
    auto consts = ops.subspan(next, c.branch_consts[b]);
    next += c.branch_consts[b];
    MCX_RETURN_IF_ERROR(check_region(k, *c.branches[b], cat("branch ", b), concat_types(shared, consts)));
    std::vector<AbstractValue> out = c.branches[b]->result_types();
    if (b == 0) {
      results = std::move(out);
      continue;
    }
    if (out.size() != results.size())
      return op_error(op_name(k), "branch ", b, " returns ", out.size(), " values ", types_str(out), ", branch 0 ",
                      results.size(), " ", types_str(results));
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != results[i])
        return op_error(op_name(k), "result ", i, ": branch ", b, " returns ", out[i].to_string(), ", branch 0 ",
                        results[i].to_string());
  }
  return results;
}

// The operands of a custom call: args, then each region's constants in region order (counts in `consts`).
struct CustomOperands {
  std::span<const AbstractValue> args;
  std::vector<std::span<const AbstractValue>> consts;
};

CustomOperands split_custom_operands(std::span<const AbstractValue> ops, int num_args,
                                     const std::vector<int64_t>& region_consts) {
  CustomOperands out{ops.subspan(0, num_args), {}};
  size_t at = num_args;
  for (int64_t n : region_consts) {
    out.consts.push_back(ops.subspan(at, n));
    at += n;
  }
  return out;
}

// The region's results start with `expected` (named `what` in the error).
absl::Status check_results_start(OpKind k, const Program& region, std::string_view region_name, std::string_view what,
                                 std::span<const AbstractValue> expected, size_t offset) {
  const std::vector<AbstractValue> out = region.result_types();
  if (out.size() < offset + expected.size())
    return op_error(op_name(k), region_name, " returns ", out.size(), " values ", types_str(out), ", expected at least ",
                    offset + expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    if (out[offset + i] != expected[i])
      return op_error(op_name(k), region_name, " returns ", what, " ", i, " as ", out[offset + i].to_string(),
                      ", expected ", expected[i].to_string());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AbstractValue>> custom_vjp_types(std::span<const AbstractValue> ops, const Attrs& attrs) {
  constexpr OpKind k = OpKind::kCustomVjpCall;
  MCX_ASSIGN_OR_RETURN(CustomVjpConfig c, get_custom_vjp_config(attrs, ops.size()));
  const CustomOperands o = split_custom_operands(ops, c.num_args, c.region_consts);
  MCX_RETURN_IF_ERROR(check_region(k, *c.fun, "fun", concat_types(o.args, o.consts[0])));
  MCX_RETURN_IF_ERROR(check_region(k, *c.fwd, "fwd", concat_types(o.args, o.consts[1])));
  const std::vector<AbstractValue> outs = c.fun->result_types();
  MCX_RETURN_IF_ERROR(check_results_start(k, *c.fwd, "fwd", "output", outs, 0));
  const std::vector<AbstractValue> fwd_out = c.fwd->result_types();
  std::vector<AbstractValue> bwd_params(fwd_out.begin() + static_cast<int64_t>(outs.size()), fwd_out.end());
  bwd_params.insert(bwd_params.end(), outs.begin(), outs.end());
  MCX_RETURN_IF_ERROR(check_region(k, *c.bwd, "bwd", concat_types(bwd_params, o.consts[2])));
  if (c.bwd->results.size() != o.args.size())
    return op_error(op_name(k), "bwd returns ", c.bwd->results.size(), " cotangents, expected one per argument (",
                    o.args.size(), ")");
  MCX_RETURN_IF_ERROR(check_results_start(k, *c.bwd, "bwd", "the cotangent of argument", o.args, 0));
  return outs;
}

absl::StatusOr<std::vector<AbstractValue>> custom_jvp_types(std::span<const AbstractValue> ops, const Attrs& attrs) {
  constexpr OpKind k = OpKind::kCustomJvpCall;
  MCX_ASSIGN_OR_RETURN(CustomJvpConfig c, get_custom_jvp_config(attrs, ops.size()));
  const CustomOperands o = split_custom_operands(ops, c.num_args, c.region_consts);
  MCX_RETURN_IF_ERROR(check_region(k, *c.fun, "fun", concat_types(o.args, o.consts[0])));
  MCX_RETURN_IF_ERROR(check_region(k, *c.jvp, "jvp", concat_types(concat_types(o.args, o.args), o.consts[1])));
  const std::vector<AbstractValue> outs = c.fun->result_types();
  if (c.jvp->results.size() != 2 * outs.size())
    return op_error(op_name(k), "jvp returns ", c.jvp->results.size(), " values, expected the ", outs.size(),
                    " outputs and their ", outs.size(), " tangents");
  MCX_RETURN_IF_ERROR(check_results_start(k, *c.jvp, "jvp", "output", outs, 0));
  MCX_RETURN_IF_ERROR(check_results_start(k, *c.jvp, "jvp", "the tangent of output", outs, outs.size()));
  return outs;
}

// The region_consts attribute: `n` non-negative counts that fit in the operands after the args.
absl::StatusOr<std::vector<int64_t>> get_region_consts(OpKind k, const Attrs& attrs, size_t n, int64_t room) {
  auto consts = attrs.get_ints("region_consts");
  if (!consts.ok()) return with_op_prefix(op_name(k), consts.status());
  if (consts->size() != n)
    return op_error(op_name(k), "attribute 'region_consts' has ", consts->size(), " entries, expected ", n,
                    " (one per region)");
  int64_t total = 0;
  for (int64_t v : *consts) {
    if (v < 0) return op_error(op_name(k), "attribute 'region_consts' has the count ", v, ", expected >= 0");
    total += v;
  }
  if (total != room)
    return op_error(op_name(k), "attribute 'region_consts' counts ", total, " constants, but ", room,
                    " operands follow the arguments");
  return *std::move(consts);
}

absl::StatusOr<int> get_result(OpKind k, const Attrs& attrs, int64_t num_results) {
  MCX_ASSIGN_OR_RETURN(int64_t result, get_int(k, attrs, "result"));
  if (result < 0 || result >= num_results)
    return op_error(op_name(k), "attribute 'result' is ", result, ", expected a result index in [0, ", num_results, ")");
  return static_cast<int>(result);
}

}  // namespace

int CondConfig::num_operands(size_t total_operands) const {
  int64_t consts = 0;
  for (int64_t c : branch_consts) consts += c;
  return static_cast<int>(static_cast<int64_t>(total_operands) - 1 - consts);
}

Attrs while_attrs(const WhileConfig& c) {
  return Attrs{{"regions", Regions{c.cond, c.body}},
               {"num_carry", int64_t{c.num_carry}},
               {"num_cond_consts", int64_t{c.num_cond_consts}},
               {"result", int64_t{c.result}}};
}

Attrs scan_attrs(const ScanConfig& c) {
  return Attrs{{"regions", Regions{c.body}},         {"num_carry", int64_t{c.num_carry}},
               {"num_xs", int64_t{c.num_xs}},        {"length", c.length},
               {"reverse", int64_t{c.reverse ? 1 : 0}}, {"result", int64_t{c.result}}};
}

Attrs cond_attrs(const CondConfig& c) {
  return Attrs{{"regions", c.branches}, {"branch_consts", c.branch_consts}, {"result", int64_t{c.result}}};
}

Attrs custom_vjp_attrs(const CustomVjpConfig& c) {
  return Attrs{{"regions", Regions{c.fun, c.fwd, c.bwd}},
               {"num_args", int64_t{c.num_args}},
               {"region_consts", c.region_consts},
               {"result", int64_t{c.result}}};
}

Attrs custom_jvp_attrs(const CustomJvpConfig& c) {
  return Attrs{{"regions", Regions{c.fun, c.jvp}},
               {"num_args", int64_t{c.num_args}},
               {"region_consts", c.region_consts},
               {"result", int64_t{c.result}}};
}

absl::StatusOr<WhileConfig> get_while_config(const Attrs& attrs, size_t num_operands) {
  constexpr OpKind k = OpKind::kWhile;
  WhileConfig c;
  MCX_ASSIGN_OR_RETURN(Regions regions, get_regions(k, attrs, 2));
  c.cond = regions[0];
  c.body = regions[1];
  const int64_t n = static_cast<int64_t>(num_operands);
  MCX_ASSIGN_OR_RETURN(c.num_carry, get_count(k, attrs, "num_carry", n));
  MCX_ASSIGN_OR_RETURN(c.num_cond_consts, get_count(k, attrs, "num_cond_consts", n - c.num_carry));
  MCX_ASSIGN_OR_RETURN(int64_t result, get_int(k, attrs, "result"));
  if (result < 0 || result >= c.num_carry)
    return op_error(op_name(k), "attribute 'result' is ", result, ", expected a carry index in [0, ", c.num_carry, ")");
  c.result = static_cast<int>(result);
  return c;
}

absl::StatusOr<ScanConfig> get_scan_config(const Attrs& attrs, size_t num_operands) {
  constexpr OpKind k = OpKind::kScan;
  ScanConfig c;
  MCX_ASSIGN_OR_RETURN(Regions regions, get_regions(k, attrs, 1));
  c.body = regions[0];
  const int64_t n = static_cast<int64_t>(num_operands);
  MCX_ASSIGN_OR_RETURN(c.num_carry, get_count(k, attrs, "num_carry", n));
  MCX_ASSIGN_OR_RETURN(c.num_xs, get_count(k, attrs, "num_xs", n - c.num_carry));
  MCX_ASSIGN_OR_RETURN(c.length, get_int(k, attrs, "length"));
  if (c.length < 0) return op_error(op_name(k), "attribute 'length' is ", c.length, ", expected >= 0");
  MCX_ASSIGN_OR_RETURN(int64_t reverse, get_int(k, attrs, "reverse"));
  if (reverse != 0 && reverse != 1) return op_error(op_name(k), "attribute 'reverse' is ", reverse, ", expected 0 or 1");
  c.reverse = reverse == 1;
  MCX_ASSIGN_OR_RETURN(c.result, get_result(k, attrs, static_cast<int64_t>(c.body->results.size())));
  return c;
}

absl::StatusOr<CondConfig> get_cond_config(const Attrs& attrs, size_t num_operands) {
  constexpr OpKind k = OpKind::kCond;
  CondConfig c;
  MCX_ASSIGN_OR_RETURN(c.branches, get_regions(k, attrs, 0));
  auto consts = attrs.get_ints("branch_consts");
  if (!consts.ok()) return with_op_prefix(op_name(k), consts.status());
  c.branch_consts = *std::move(consts);
  if (c.branch_consts.size() != c.branches.size())
    return op_error(op_name(k), "attribute 'branch_consts' has ", c.branch_consts.size(), " entries, expected one per branch (",
                    c.branches.size(), ")");
  int64_t total = 0;
  for (int64_t v : c.branch_consts) {
    if (v < 0) return op_error(op_name(k), "attribute 'branch_consts' has the count ", v, ", expected >= 0");
    total += v;
  }
  if (num_operands < 1 || total > static_cast<int64_t>(num_operands) - 1)
    return op_error(op_name(k), "takes the branch index and ", total, " branch constants, found ", num_operands,
                    " operands");
  MCX_ASSIGN_OR_RETURN(c.result, get_result(k, attrs, static_cast<int64_t>(c.branches[0]->results.size())));
  return c;
}

absl::StatusOr<CustomCallParts> get_custom_call_parts(OpKind kind, const Attrs& attrs, size_t num_operands) {
  if (!is_custom_call(kind)) return absl::InternalError(cat("[", op_name(kind), "] is not a custom-rule call"));
  const size_t num_regions = kind == OpKind::kCustomVjpCall ? 3 : 2;
  CustomCallParts c;
  MCX_ASSIGN_OR_RETURN(c.regions, get_regions(kind, attrs, num_regions));
  const int64_t n = static_cast<int64_t>(num_operands);
  MCX_ASSIGN_OR_RETURN(c.num_args, get_count(kind, attrs, "num_args", n));
  MCX_ASSIGN_OR_RETURN(c.region_consts, get_region_consts(kind, attrs, num_regions, n - c.num_args));
  MCX_ASSIGN_OR_RETURN(c.result, get_result(kind, attrs, static_cast<int64_t>(c.regions[0]->results.size())));
  return c;
}

absl::StatusOr<CustomVjpConfig> get_custom_vjp_config(const Attrs& attrs, size_t num_operands) {
  constexpr OpKind k = OpKind::kCustomVjpCall;
  MCX_ASSIGN_OR_RETURN(CustomCallParts parts, get_custom_call_parts(k, attrs, num_operands));
  CustomVjpConfig c{parts.regions[0], parts.regions[1], parts.regions[2], parts.num_args,
                    std::move(parts.region_consts), parts.result};
  if (c.fwd->results.size() < c.fun->results.size())
    return op_error(op_name(k), "fwd returns ", c.fwd->results.size(), " values, expected fun's ",
                    c.fun->results.size(), " outputs then the residuals");
  return c;
}

absl::StatusOr<CustomJvpConfig> get_custom_jvp_config(const Attrs& attrs, size_t num_operands) {
  MCX_ASSIGN_OR_RETURN(CustomCallParts parts, get_custom_call_parts(OpKind::kCustomJvpCall, attrs, num_operands));
  return CustomJvpConfig{parts.regions[0], parts.regions[1], parts.num_args, std::move(parts.region_consts),
                         parts.result};
}

absl::StatusOr<std::vector<AbstractValue>> control_flow_result_types(OpKind kind,
                                                                     std::span<const AbstractValue> operands,
                                                                     const Attrs& attrs, const SymbolicScope& scope) {
  switch (kind) {
    case OpKind::kWhile: return while_types(operands, attrs);
    case OpKind::kScan: return scan_types(operands, attrs, scope);
    case OpKind::kCond: return cond_types(operands, attrs);
    case OpKind::kCustomVjpCall: return custom_vjp_types(operands, attrs);
    case OpKind::kCustomJvpCall: return custom_jvp_types(operands, attrs);
    case OpKind::kShardMap: return shard_map_result_types(operands, attrs);
    default: break;
  }
  return absl::InternalError(cat("[", op_name(kind), "] is not an op with regions"));
}

absl::StatusOr<AbstractValue> control_flow_infer_type(OpKind kind, std::span<const AbstractValue> operands,
                                                      const Attrs& attrs, const SymbolicScope& scope) {
  MCX_ASSIGN_OR_RETURN(std::vector<AbstractValue> types, control_flow_result_types(kind, operands, attrs, scope));
  MCX_ASSIGN_OR_RETURN(int64_t result, get_int(kind, attrs, "result"));
  return types.at(static_cast<size_t>(result));  // in range: checked by the get_*_config above
}

Attrs with_result_index(Attrs attrs, int result) {
  attrs.set("result", int64_t{result});
  return attrs;
}

std::vector<ValueId> emit_siblings(ProgramBuilder& b, OpKind kind, const Attrs& attrs,
                                   std::span<const ValueId> operands, int num_results) {
  std::vector<ValueId> ops(operands.begin(), operands.end());
  std::vector<ValueId> out;
  for (int k = 0; k < num_results; ++k) out.push_back(b.emit_or_throw(kind, ops, with_result_index(attrs, k)));
  return out;
}

int num_group_results(const Instr& instr) {
  if (!has_regions(instr.kind)) return 0;
  auto regions = instr.attrs.get_regions("regions");
  if (!regions.ok() || regions->empty()) return 0;
  // A while's results are its body's (region 1); every other op's are its first region's (scan body,
  // branch 0, fun).
  const size_t r = instr.kind == OpKind::kWhile ? 1 : 0;
  return r < regions->size() && (*regions)[r] ? static_cast<int>((*regions)[r]->results.size()) : 0;
}

int result_index(const Instr& instr) {
  auto r = instr.attrs.get_int("result");
  return r.ok() ? static_cast<int>(*r) : 0;
}

bool are_siblings(const Instr& a, const Instr& b) {
  if (a.kind != b.kind || !has_regions(a.kind) || a.operands != b.operands) return false;
  return with_result_index(a.attrs, 0) == with_result_index(b.attrs, 0);
}

std::string control_flow_autodiff_error(OpKind kind, std::string_view mode) {
  if (kind == OpKind::kCustomVjpCall && mode == "forward")
    return "[jvp] can't apply forward-mode autodiff (jvp) to a custom_vjp function: it defines only a reverse-mode "
           "rule; use custom_jvp (whose rule serves both modes) or differentiate in reverse mode";
  if (kind == OpKind::kWhile && mode == "reverse")
    return "[grad] reverse-mode differentiation does not work for while loops (while_loop, or fori_loop with a "
           "dynamic trip count): the number of iterations is not known when the backward pass is built; use "
           "scan, or fori_loop with static bounds";
  return cat("[", mode == "reverse" ? "grad" : "jvp", "] ", op_name(kind), " has no ", mode,
             "-mode rule of its own: its sibling group is differentiated as a whole");
}

std::vector<int> sibling_group_firsts(const Program& program) {
  std::vector<int> first(program.instrs.size(), -1);
  for (int i = 0; i < static_cast<int>(program.instrs.size()); ++i) {
    if (!has_regions(program.instrs[i].kind)) continue;
    first[i] = i;
    for (int j = i - 1; j >= 0; --j) {
      if (first[j] == j && are_siblings(program.instrs[j], program.instrs[i])) {
        first[i] = j;
        break;
      }
    }
  }
  return first;
}

bool has_custom_calls(const Program& program) {
  for (const Instr& in : program.instrs)
    if (is_custom_call(in.kind)) return true;
  return false;
}

}  // namespace mcx::ir
