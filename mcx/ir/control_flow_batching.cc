#include "mcx/ir/control_flow_batching.h"

#include <memory>
#include <string>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/batching.h"
#include "mcx/ir/batching_rules.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/custom_rules.h"
#include "mcx/ir/shard_map.h"

namespace mcx::ir::internal {
namespace {

// x batched along axis 0 (broadcast when it is not).
ValueId batched_value(ProgramBuilder& b, ValueId x, bool is_batched, const DimExpr& size) {
  return is_batched ? x : broadcast_batch(b, x, size);
}

// Swaps axes 0 and 1.
ValueId swap_leading(ProgramBuilder& b, ValueId x) {
  std::vector<int64_t> perm{1, 0};
  for (int64_t d = 2; d < b.type(x).rank(); ++d) perm.push_back(d);
  return b.transpose(x, std::move(perm));
}

std::shared_ptr<const Program> vmapped(const Program& p, const std::vector<bool>& batched, const DimExpr& size) {
  return std::make_shared<const Program>(value_or_throw(vmap_program(p, batched, size)));
}

std::vector<ValueId> batch_scan(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                const std::vector<bool>& batched, const DimExpr& size) {
  ScanConfig c = value_or_throw(get_scan_config(instr.attrs, operands.size()));
  const int nc = c.num_carry, nx = c.num_xs;
  const int nr = static_cast<int>(c.body->results.size());
  std::vector<bool> body_batched(operands.size(), true);
  std::vector<ValueId> ops;
  for (int i = 0; i < nc; ++i) ops.push_back(batched_value(b, operands[i], batched[i], size));
  for (int i = nc; i < nc + nx; ++i) {
    body_batched[i] = batched[i];
    ops.push_back(batched[i] ? swap_leading(b, operands[i]) : operands[i]);
  }
  for (size_t i = nc + nx; i < operands.size(); ++i) {
    body_batched[i] = batched[i];
    ops.push_back(operands[i]);
  }
  c.body = vmapped(*c.body, body_batched, size);
  std::vector<ValueId> out = emit_siblings(b, OpKind::kScan, scan_attrs(c), ops, nr);
  for (int i = nc; i < nr; ++i) out[i] = swap_leading(b, out[i]);  // [T, B, ...] -> [B, T, ...]
  return out;
}

std::vector<ValueId> batch_while(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                 const std::vector<bool>& batched, const DimExpr& size) {
  const WhileConfig c = value_or_throw(get_while_config(instr.attrs, operands.size()));
  const int nc = c.num_carry, nq = c.num_cond_consts;
  const int nb = static_cast<int>(operands.size()) - nc - nq;
  std::vector<bool> cond_batched(nc, true), body_batched(nc, true);
  for (int i = 0; i < nq; ++i) cond_batched.push_back(batched[nc + i]);
  for (int i = 0; i < nb; ++i) body_batched.push_back(batched[nc + nq + i]);
  const Program cond_v = value_or_throw(vmap_program(*c.cond, cond_batched, size));  // -> bool[B]
  const Program body_v = value_or_throw(vmap_program(*c.body, body_batched, size));

  // cond: any element's condition holds.
  ProgramBuilder cb(c.cond->name + "_vmap_any", c.cond->scope);
  std::vector<ValueId> cargs;
  for (const AbstractValue& t : cond_v.params) cargs.push_back(cb.add_parameter(t));
  ValueId pred = value_or_throw(inline_program(cb, cond_v, cargs))[0];
  ValueId any = cb.reduce_sum(cb.convert(pred, DType::kInt32), {0});
  ValueId holds = cb.binary(OpKind::kGt, any, cb.scalar_constant(DType::kInt32, 0));
  // body: (carries, cond consts, body consts) -> each element advances only while its condition holds.
  ProgramBuilder bb(c.body->name + "_vmap_masked", c.body->scope);
  std::vector<ValueId> carries, qs, bs;
  for (int i = 0; i < nc; ++i) carries.push_back(bb.add_parameter(body_v.params[i]));
  for (int i = 0; i < nq; ++i) qs.push_back(bb.add_parameter(cond_v.params[nc + i]));
  for (int i = 0; i < nb; ++i) bs.push_back(bb.add_parameter(body_v.params[nc + i]));
  std::vector<ValueId> cond_args = carries, body_args = carries;
  cond_args.insert(cond_args.end(), qs.begin(), qs.end());
  body_args.insert(body_args.end(), bs.begin(), bs.end());
  ValueId live = value_or_throw(inline_program(bb, cond_v, cond_args))[0];
  std::vector<ValueId> next = value_or_throw(inline_program(bb, body_v, body_args));
  std::vector<ValueId> kept;
  for (int i = 0; i < nc; ++i) {
    const Shape shape = bb.type(next[i]).shape;
    ValueId mask = shape.size() == 1 ? live : bb.broadcast_in_dim(live, shape, {0});
    kept.push_back(bb.select(mask, next[i], carries[i]));
  }

  WhileConfig batched_config = c;
  batched_config.cond = std::make_shared<const Program>(std::move(cb).build({holds}));
  batched_config.body = std::make_shared<const Program>(std::move(bb).build(std::move(kept)));
  std::vector<ValueId> ops;
  for (int i = 0; i < nc; ++i) ops.push_back(batched_value(b, operands[i], batched[i], size));
  for (int i = 0; i < nq; ++i) ops.push_back(operands[nc + i]);  // cond's constants
  for (int i = 0; i < nq; ++i) ops.push_back(operands[nc + i]);  // the body reads them too
  for (int i = 0; i < nb; ++i) ops.push_back(operands[nc + nq + i]);
  return emit_siblings(b, OpKind::kWhile, while_attrs(batched_config), ops, nc);
}

std::vector<ValueId> batch_cond(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                const std::vector<bool>& batched, const DimExpr& size) {
  CondConfig c = value_or_throw(get_cond_config(instr.attrs, operands.size()));
  const int n = c.num_operands(operands.size());
  const int nr = static_cast<int>(c.branches[0]->results.size());
  std::vector<std::vector<bool>> branch_batched(c.branches.size());
  std::vector<std::vector<ValueId>> branch_args(c.branches.size());
  for (size_t i = 0, at = 1 + n; i < c.branches.size(); at += c.branch_consts[i], ++i) {
    for (int p = 0; p < n; ++p) {
      branch_batched[i].push_back(batched[1 + p]);
      branch_args[i].push_back(operands[1 + p]);
    }
    for (int64_t k = 0; k < c.branch_consts[i]; ++k) {
      branch_batched[i].push_back(batched[at + k]);
      branch_args[i].push_back(operands[at + k]);
    }
  }
  // A branch none of whose parameters is batched is batched by broadcasting its results.
  auto branch_program = [&](size_t i) -> std::shared_ptr<const Program> {
    bool any = false;
    for (bool x : branch_batched[i]) any = any || x;
    if (any) return vmapped(*c.branches[i], branch_batched[i], size);
    const Program& br = *c.branches[i];
    ProgramBuilder pb(br.name + "_vmap", br.scope);
    std::vector<ValueId> args;
    for (const AbstractValue& t : br.params) args.push_back(pb.add_parameter(t));
    std::vector<ValueId> out = value_or_throw(inline_program(pb, br, args));
    for (ValueId& v : out) v = broadcast_batch(pb, v, size);
    return std::make_shared<const Program>(std::move(pb).build(std::move(out)));
  };
  if (!batched[0]) {
    for (size_t i = 0; i < c.branches.size(); ++i) c.branches[i] = branch_program(i);
    return emit_siblings(b, OpKind::kCond, cond_attrs(c), operands, nr);
  }
  // A batched index: every branch on the whole batch, then per element the result of its branch.
  const int64_t last = static_cast<int64_t>(c.branches.size()) - 1;
  ValueId index = b.emit_or_throw(OpKind::kClamp, {b.full_like(operands[0], 0.0), operands[0],
                                                   b.full_like(operands[0], static_cast<double>(last))});
  std::vector<std::vector<ValueId>> results(c.branches.size());
  for (size_t i = 0; i < c.branches.size(); ++i)
    results[i] = value_or_throw(inline_program(b, *branch_program(i), branch_args[i]));
  std::vector<ValueId> out = results[last];
  for (int64_t i = last - 1; i >= 0; --i) {
    ValueId is_i = b.binary(OpKind::kEq, index, b.full_like(index, static_cast<double>(i)));
    for (int r = 0; r < nr; ++r) {
      const Shape shape = b.type(out[r]).shape;
      ValueId mask = shape.size() == 1 ? is_i : b.broadcast_in_dim(is_i, shape, {0});
      out[r] = b.select(mask, results[i][r], out[r]);
    }
  }
  return out;
}

}  // namespace

std::vector<ValueId> emit_control_flow_batching(ProgramBuilder& b, const Instr& instr,
                                                std::span<const ValueId> operands, const std::vector<bool>& batched,
                                                const DimExpr& size) {
  switch (instr.kind) {
    case OpKind::kScan: return batch_scan(b, instr, operands, batched, size);
    case OpKind::kWhile: return batch_while(b, instr, operands, batched, size);
    case OpKind::kCond: return batch_cond(b, instr, operands, batched, size);
    case OpKind::kCustomVjpCall:
    case OpKind::kCustomJvpCall: return emit_custom_call_batching(b, instr, operands, batched, size);
    case OpKind::kShardMap: return emit_shard_map_batching(b, instr, operands, batched, size);
    default: break;
  }
  throw Internal(std::string("[vmap] ") + std::string(op_name(instr.kind)) + " has no regions");
}

}  // namespace mcx::ir::internal
