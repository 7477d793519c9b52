#include "mcx/ir/jvp_rules.h"

#include <string>
#include <vector>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/str_util.h"
#include "mcx/ir/vjp_rules.h"

namespace mcx::ir::internal {
namespace {

constexpr ValueId kZero = -1;

enum class RuleKind { kLinear, kBilinear, kTransposedVjp };

// The reduction an all_reduce / reduce_scatter / reduce_window performs (0 is sum in each of them).
bool reduces_by_sum(const Instr& instr) {
  absl::StatusOr<int64_t> r = instr.attrs.get_int("reduce");
  return r.ok() && *r == 0;
}

RuleKind rule_kind(const Instr& instr) {
  switch (instr.kind) {
    case OpKind::kNeg:
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kConvert:
    case OpKind::kSelect:
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kDynamicSlice:
    case OpKind::kDynamicUpdateSlice:
    case OpKind::kConcatenate:
    case OpKind::kPad:
    case OpKind::kReverse:
    case OpKind::kReduceSum:
    case OpKind::kCumsum:
    case OpKind::kTake:
    case OpKind::kScatterAdd:
    case OpKind::kAllGather:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
    case OpKind::kShardingConstraint:
    case OpKind::kRematBarrier:
      return RuleKind::kLinear;
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
    case OpKind::kReduceWindow:
      return reduces_by_sum(instr) ? RuleKind::kLinear : RuleKind::kTransposedVjp;
    case OpKind::kMul:
    case OpKind::kDotGeneral:
    case OpKind::kConvGeneralDilated:
      return RuleKind::kBilinear;
    default:
      return RuleKind::kTransposedVjp;
  }
}

// The op applied to the tangents: floating operands are replaced by their tangent (zeros when they have
// none), the others (indices, predicates) keep their primal values.
ValueId linear_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                    std::span<const ValueId> tangents) {
  std::vector<ValueId> args;
  for (size_t k = 0; k < operands.size(); ++k) {
    if (!is_floating(b.type(operands[k]).dtype)) {
      args.push_back(operands[k]);
    } else {
      args.push_back(tangents[k] != kZero ? tangents[k] : b.full_like(operands[k], 0.0));
    }
  }
  return b.emit_or_throw(instr.kind, std::move(args), instr.attrs);
}

// op(t_a, b) + op(a, t_b), leaving out the terms whose tangent is zero.
ValueId bilinear_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                      std::span<const ValueId> tangents) {
  ValueId sum = kZero;
  for (size_t k = 0; k < 2; ++k) {
    if (tangents[k] == kZero) continue;
    std::vector<ValueId> args(operands.begin(), operands.end());
    args[k] = tangents[k];
    ValueId term = b.emit_or_throw(instr.kind, std::move(args), instr.attrs);
    sum = sum == kZero ? term : b.binary(OpKind::kAdd, sum, term);
  }
  return sum;
}

// The transpose of the op's VJP rule applied to the tangents. The rule is written into a small program
//   M: (operands..., result, ct) -> (the contribution of each operand that has a tangent)
// which is linear in ct; reverse-mode autodiff of M with respect to ct, with the tangents as the
// cotangents of M's results, gives sum_k (d contribution_k / d ct)^T t_k = the result's tangent.
// The program is inlined into b with ct bound to zeros (its value is irrelevant: M is linear in ct, and
// the replayed forward part of M is dead code that eliminate_dead_code removes).
ValueId transposed_vjp_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                            ValueId result, std::span<const ValueId> tangents) {
  ProgramBuilder m(std::string("jvp_of_") + std::string(op_name(instr.kind)), b.scope());
  std::vector<ValueId> m_operands;
  for (ValueId v : operands) m_operands.push_back(m.add_parameter(b.type(v)));
  const ValueId m_result = m.add_parameter(b.type(result));
  const ValueId m_ct = m.add_parameter(b.type(result));
  std::vector<bool> needed;
  for (ValueId t : tangents) needed.push_back(t != kZero);
  std::vector<ValueId> contributions = emit_vjp_rule(m, instr, m_operands, m_result, m_ct, needed);
  std::vector<ValueId> m_results;
  std::vector<ValueId> args(operands.begin(), operands.end());
  args.push_back(result);
  args.push_back(b.full_like(result, 0.0));
  for (size_t k = 0; k < operands.size(); ++k) {
    if (!needed[k]) continue;
    ValueId c = k < contributions.size() ? contributions[k] : kZero;
    if (c == kZero) {
      c = m.full_like(m_operands[k], 0.0);  // the op passes no cotangent to this operand
    } else if (m.type(c).shape != m.type(m_operands[k]).shape) {
      const Shape want = m.type(m_operands[k]).shape;
      c = m.reshape(c, want);
    }
    m_results.push_back(c);
    args.push_back(tangents[k]);
  }
  const int ct_param = static_cast<int>(operands.size()) + 1;
  Program rule = std::move(m).build(std::move(m_results));
  Program transposed = value_or_throw(vjp_program(rule, {ct_param}));
  std::vector<ValueId> out = value_or_throw(inline_program(b, transposed, args));
  return out.back();
}

}  // namespace

ValueId emit_jvp_rule(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands, ValueId result,
                      std::span<const ValueId> tangents) {
  if (!op_info(instr.kind).differentiable || !is_floating(b.type(result).dtype)) return kZero;
  bool any = false;
  for (size_t k = 0; k < tangents.size(); ++k) any = any || tangents[k] != kZero;
  if (!any) return kZero;
  // Ops with regions are differentiated per sibling group (forward.cc) and never reach here.
  if (has_regions(instr.kind)) throw Internal(control_flow_autodiff_error(instr.kind, "forward"));
  switch (rule_kind(instr)) {
    case RuleKind::kLinear:
      return linear_rule(b, instr, operands, tangents);
    case RuleKind::kBilinear:
      return bilinear_rule(b, instr, operands, tangents);
    case RuleKind::kTransposedVjp:
      return transposed_vjp_rule(b, instr, operands, result, tangents);
  }
  throw Internal(cat("[jvp_program] no rule kind for ", op_name(instr.kind)));
}

}  // namespace mcx::ir::internal
