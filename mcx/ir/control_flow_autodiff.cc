#include "mcx/ir/control_flow_autodiff.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "mcx/core/error.h"
#include "mcx/ir/autodiff.h"
#include "mcx/ir/forward.h"
#include "mcx/ir/passes.h"

namespace mcx::ir::internal {
namespace {

ScanConfig scan_config_of(const Instr& instr) {
  return value_or_throw(get_scan_config(instr.attrs, instr.operands.size()));
}

// A scan's configuration, the sizes of its operand groups (carries, xs, constants) and its body's results.
struct ScanParts {
  explicit ScanParts(const Instr& instr)
      : config(scan_config_of(instr)),
        nc(config.num_carry),
        nx(config.num_xs),
        nk(static_cast<int>(instr.operands.size()) - nc - nx),
        ny(static_cast<int>(config.body->results.size()) - nc),
        out_types(config.body->result_types()) {}
  ScanConfig config;
  int nc, nx, nk, ny;
  std::vector<AbstractValue> out_types;
};

std::vector<ValueId> emit_scan(ProgramBuilder& b, const ScanConfig& config, std::span<const ValueId> operands) {
  return emit_siblings(b, OpKind::kScan, scan_attrs(config), operands, static_cast<int>(config.body->results.size()));
}

std::vector<ValueId> emit_cond(ProgramBuilder& b, const CondConfig& config, std::span<const ValueId> operands) {
  return emit_siblings(b, OpKind::kCond, cond_attrs(config), operands,
                       static_cast<int>(config.branches[0]->results.size()));
}

}  // namespace

ValueId zeros_of(ProgramBuilder& b, const AbstractValue& t) {
  ValueId c = b.scalar_constant(t.dtype, 0.0);
  return t.rank() == 0 ? c : b.broadcast_in_dim(c, t.shape, {});
}

std::vector<int> floating_params(const Program& p, int first, int count) {
  std::vector<int> out;
  for (int i = first; i < first + count; ++i)
    if (is_floating(p.params[i].dtype)) out.push_back(i);
  return out;
}

std::vector<ValueId> emit_scan_with_residuals(ProgramBuilder& b, const Instr& instr,
                                              std::span<const ValueId> operands) {
  ScanConfig config = scan_config_of(instr);
  Program body = *config.body;  // the same body, also returning the carries it was given
  for (int i = 0; i < config.num_carry; ++i) body.results.push_back(i);
  config.body = std::make_shared<const Program>(std::move(body));
  return emit_scan(b, std::move(config), operands);
}

std::vector<ValueId> emit_scan_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> forward,
                                   std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed) {
  const ScanParts parts(instr);
  const ScanConfig& fwd = parts.config;
  const Program& body = *fwd.body;
  const int nc = parts.nc, nx = parts.nx, nk = parts.nk, ny = parts.ny;
  const std::vector<AbstractValue>& out_types = parts.out_types;
  auto floating = [](const AbstractValue& t) { return is_floating(t.dtype); };
  std::vector<int> fc, fx, fk, fy;  // floating carries, xs, consts, ys (indices within their group)
  for (int i = 0; i < nc; ++i) if (floating(body.params[i])) fc.push_back(i);
  for (int i = 0; i < nx; ++i) if (floating(body.params[nc + i])) fx.push_back(i);
  for (int i = 0; i < nk; ++i) if (floating(body.params[nc + nx + i])) fk.push_back(i);
  for (int i = 0; i < ny; ++i) if (floating(out_types[nc + i])) fy.push_back(i);
  std::vector<int> wrt;  // the body's floating parameters: carries, x slices, consts
  for (int i : fc) wrt.push_back(i);
  for (int i : fx) wrt.push_back(nc + i);
  for (int i : fk) wrt.push_back(nc + nx + i);
  const Program body_vjp = drop_side_effects(value_or_throw(vjp_program(body, wrt)));

  // The backward body: carries (cotangents of the floating carries, sums of the floating constants'
  // cotangents), xs (the stacked carries, the xs, the ys' cotangents), constants (the forward constants).
  ProgramBuilder bb(body.name + "_vjp", body.scope);
  std::vector<ValueId> ct_carry, acc, carry_in, x_in, ct_y, k_in;
  for (int i : fc) ct_carry.push_back(bb.add_parameter(body.params[i]));
  for (int i : fk) acc.push_back(bb.add_parameter(body.params[nc + nx + i]));
  for (int i = 0; i < nc; ++i) carry_in.push_back(bb.add_parameter(body.params[i]));
  for (int i = 0; i < nx; ++i) x_in.push_back(bb.add_parameter(body.params[nc + i]));
  for (int i : fy) ct_y.push_back(bb.add_parameter(out_types[nc + i]));
  for (int i = 0; i < nk; ++i) k_in.push_back(bb.add_parameter(body.params[nc + nx + i]));
  std::vector<ValueId> args = carry_in;
  args.insert(args.end(), x_in.begin(), x_in.end());
  args.insert(args.end(), k_in.begin(), k_in.end());
  for (int i = 0, f = 0; i < nc; ++i) {
    const bool is_f = f < static_cast<int>(fc.size()) && fc[f] == i;
    args.push_back(is_f ? ct_carry[f++] : zeros_of(bb, out_types[i]));
  }
  for (int i = 0, f = 0; i < ny; ++i) {
    const bool is_f = f < static_cast<int>(fy.size()) && fy[f] == i;
    args.push_back(is_f ? ct_y[f++] : zeros_of(bb, out_types[nc + i]));
  }
  std::vector<ValueId> v = value_or_throw(inline_program(bb, body_vjp, args));
  const size_t g0 = body.results.size();  // the gradients follow the primal results, in wrt order
  std::vector<ValueId> bwd_results;
  for (size_t j = 0; j < fc.size(); ++j) bwd_results.push_back(v[g0 + j]);
  for (size_t j = 0; j < fk.size(); ++j)
    bwd_results.push_back(bb.binary(OpKind::kAdd, acc[j], v[g0 + fc.size() + fx.size() + j]));
  for (size_t j = 0; j < fx.size(); ++j) bwd_results.push_back(v[g0 + fc.size() + j]);

  // The backward scan's operands, in the outer builder.
  std::vector<ValueId> ops;
  for (int i : fc) ops.push_back(result_cts[i] ? *result_cts[i] : b.full_like(forward[i], 0.0));
  for (int i : fk) ops.push_back(b.full_like(operands[nc + nx + i], 0.0));
  for (int i = 0; i < nc; ++i) ops.push_back(forward[nc + ny + i]);  // the stacked carries
  for (int i = 0; i < nx; ++i) ops.push_back(operands[nc + i]);
  for (int i : fy) ops.push_back(result_cts[nc + i] ? *result_cts[nc + i] : b.full_like(forward[nc + i], 0.0));
  for (int i = 0; i < nk; ++i) ops.push_back(operands[nc + nx + i]);
  ScanConfig bwd;
  // The body VJP's primal results are not needed (only its gradients): drop what computes only them.
  bwd.body = std::make_shared<const Program>(eliminate_dead_code(std::move(bb).build(std::move(bwd_results))));
  bwd.num_carry = static_cast<int>(fc.size() + fk.size());
  bwd.num_xs = nc + nx + static_cast<int>(fy.size());
  bwd.length = fwd.length;
  bwd.reverse = !fwd.reverse;
  std::vector<ValueId> out = emit_scan(b, std::move(bwd), ops);

  std::vector<ValueId> contributions(operands.size(), -1);
  for (size_t j = 0; j < fc.size(); ++j) contributions[fc[j]] = out[j];
  for (size_t j = 0; j < fk.size(); ++j) contributions[nc + nx + fk[j]] = out[fc.size() + j];
  for (size_t j = 0; j < fx.size(); ++j) contributions[nc + fx[j]] = out[fc.size() + fk.size() + j];
  for (size_t k = 0; k < contributions.size(); ++k)
    if (k < needed.size() && !needed[k]) contributions[k] = -1;
  return contributions;
}

std::vector<ValueId> emit_scan_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> tangents) {
  const ScanParts parts(instr);
  const ScanConfig& fwd = parts.config;
  const Program& body = *fwd.body;
  const int nc = parts.nc, nx = parts.nx, nk = parts.nk, ny = parts.ny;
  const std::vector<AbstractValue>& out_types = parts.out_types;
  std::vector<int> wrt;  // every floating parameter of the body
  for (int p = 0; p < body.num_params(); ++p)
    if (is_floating(body.params[p].dtype)) wrt.push_back(p);
  const Program body_jvp = drop_side_effects(value_or_throw(jvp_program(body, wrt)));
  std::vector<int> position(body.num_params(), -1);  // parameter -> its tangent's index in wrt
  for (size_t j = 0; j < wrt.size(); ++j) position[wrt[j]] = static_cast<int>(j);
  auto floating_in = [&](int first, int count) {
    std::vector<int> out;
    for (int p = first; p < first + count; ++p)
      if (position[p] >= 0) out.push_back(p);
    return out;
  };
  const std::vector<int> fc = floating_in(0, nc), fx = floating_in(nc, nx), fk = floating_in(nc + nx, nk);
  std::vector<int> fy;
  for (int i = 0; i < ny; ++i)
    if (is_floating(out_types[nc + i].dtype)) fy.push_back(i);

  // The new body: (carries, their tangents, x slices, their tangents, consts, their tangents) ->
  // (carries', their tangents, ys, the floating ys' tangents).
  ProgramBuilder bb(body.name + "_jvp", body.scope);
  std::vector<ValueId> primal(body.num_params()), tangent(wrt.size());
  auto add_group = [&](int first, int count, const std::vector<int>& floating) {
    for (int p = first; p < first + count; ++p) primal[p] = bb.add_parameter(body.params[p]);
    for (int p : floating) tangent[position[p]] = bb.add_parameter(body.params[p]);
  };
  add_group(0, nc, fc);
  add_group(nc, nx, fx);
  add_group(nc + nx, nk, fk);
  std::vector<ValueId> args = primal;
  args.insert(args.end(), tangent.begin(), tangent.end());
  std::vector<ValueId> v = value_or_throw(inline_program(bb, body_jvp, args));
  const int nr = static_cast<int>(body.results.size());  // v: results, then their tangents
  std::vector<ValueId> results;
  for (int i = 0; i < nc; ++i) results.push_back(v[i]);
  for (int p : fc) results.push_back(v[nr + p]);
  for (int i = 0; i < ny; ++i) results.push_back(v[nc + i]);
  for (int i : fy) results.push_back(v[nr + nc + i]);

  std::vector<ValueId> ops;
  auto add_operands = [&](int first, int count, const std::vector<int>& floating) {
    for (int p = first; p < first + count; ++p) ops.push_back(operands[p]);
    for (int p : floating) ops.push_back(tangents[p] >= 0 ? tangents[p] : b.full_like(operands[p], 0.0));
  };
  add_operands(0, nc, fc);
  add_operands(nc, nx, fx);
  add_operands(nc + nx, nk, fk);
  ScanConfig jvp = fwd;
  jvp.body = std::make_shared<const Program>(std::move(bb).build(std::move(results)));
  jvp.num_carry = nc + static_cast<int>(fc.size());
  jvp.num_xs = nx + static_cast<int>(fx.size());
  std::vector<ValueId> out = emit_scan(b, std::move(jvp), ops);

  std::vector<ValueId> result_tangents(body.results.size(), -1);
  for (size_t j = 0; j < fc.size(); ++j) result_tangents[fc[j]] = out[nc + j];
  for (size_t j = 0; j < fy.size(); ++j) result_tangents[nc + fy[j]] = out[nc + fc.size() + ny + j];
  return result_tangents;
}

std::vector<ValueId> emit_cond_vjp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> /*forward: not needed, the branches recompute*/,
                                   std::span<const std::optional<ValueId>> result_cts, const std::vector<bool>& needed) {
  const CondConfig fwd = value_or_throw(get_cond_config(instr.attrs, instr.operands.size()));
  const int n = fwd.num_operands(operands.size());
  const size_t nb = fwd.branches.size();
  const std::vector<AbstractValue> out_types = fwd.branches[0]->result_types();
  std::vector<int> fy;
  for (size_t i = 0; i < out_types.size(); ++i)
    if (is_floating(out_types[i].dtype)) fy.push_back(static_cast<int>(i));
  const std::vector<int> fo = floating_params(*fwd.branches[0], 0, n);  // the shared floating operands
  std::vector<std::vector<int>> fk(nb);                                 // each branch's floating consts
  std::vector<int> const_offset(nb);  // where branch i's consts start among the operands
  for (size_t i = 0, at = 1 + n; i < nb; at += fwd.branch_consts[i], ++i) {
    const_offset[i] = static_cast<int>(at);
    fk[i] = floating_params(*fwd.branches[i], n, static_cast<int>(fwd.branch_consts[i]));
  }
  CondConfig bwd;
  for (size_t i = 0; i < nb; ++i) {
    const Program& branch = *fwd.branches[i];
    std::vector<int> wrt = fo;
    wrt.insert(wrt.end(), fk[i].begin(), fk[i].end());
    ProgramBuilder bb(branch.name + "_vjp", branch.scope);
    std::vector<ValueId> args, cts;
    for (int p = 0; p < n; ++p) args.push_back(bb.add_parameter(branch.params[p]));
    for (int y : fy) cts.push_back(bb.add_parameter(out_types[y]));
    for (int p = n; p < branch.num_params(); ++p) args.push_back(bb.add_parameter(branch.params[p]));
    for (size_t y = 0, f = 0; y < out_types.size(); ++y) {
      const bool is_f = f < fy.size() && fy[f] == static_cast<int>(y);
      args.push_back(is_f ? cts[f++] : zeros_of(bb, out_types[y]));
    }
    std::vector<ValueId> results;
    if (!wrt.empty()) {
      std::vector<ValueId> v = value_or_throw(inline_program(bb, drop_side_effects(value_or_throw(vjp_program(branch, wrt))), args));
      const size_t g0 = branch.results.size();
      for (size_t j = 0; j < fo.size(); ++j) results.push_back(v[g0 + j]);
      for (size_t other = 0; other < nb; ++other)
        for (size_t j = 0; j < fk[other].size(); ++j)
          results.push_back(other == i ? v[g0 + fo.size() + j]
                                       : zeros_of(bb, fwd.branches[other]->params[fk[other][j]]));
    } else {
      for (int p : fo) results.push_back(zeros_of(bb, branch.params[p]));
      for (size_t other = 0; other < nb; ++other)
        for (int p : fk[other]) results.push_back(zeros_of(bb, fwd.branches[other]->params[p]));
    }
    bwd.branches.push_back(std::make_shared<const Program>(eliminate_dead_code(std::move(bb).build(std::move(results)))));
    bwd.branch_consts.push_back(fwd.branch_consts[i]);
  }
  std::vector<ValueId> ops{operands[0]};
  for (int p = 0; p < n; ++p) ops.push_back(operands[1 + p]);
  for (int y : fy) ops.push_back(result_cts[y] ? *result_cts[y] : zeros_of(b, out_types[y]));
  for (size_t i = 0; i < nb; ++i)
    for (int64_t c = 0; c < fwd.branch_consts[i]; ++c) ops.push_back(operands[const_offset[i] + c]);
  std::vector<ValueId> contributions(operands.size(), -1);
  if (fo.empty() && std::all_of(fk.begin(), fk.end(), [](const auto& v) { return v.empty(); })) return contributions;
  std::vector<ValueId> out = emit_cond(b, std::move(bwd), ops);
  size_t next = 0;
  for (int p : fo) contributions[1 + p] = out[next++];
  for (size_t i = 0; i < nb; ++i)
    for (int p : fk[i]) contributions[const_offset[i] + (p - n)] = out[next++];
  for (size_t k = 0; k < contributions.size(); ++k)
    if (k < needed.size() && !needed[k]) contributions[k] = -1;
  return contributions;
}

std::vector<ValueId> emit_while_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                    std::span<const ValueId> tangents) {
  const WhileConfig fwd = value_or_throw(get_while_config(instr.attrs, instr.operands.size()));
  const Program& body = *fwd.body;
  const int nc = fwd.num_carry, nq = fwd.num_cond_consts;
  const int nb = static_cast<int>(operands.size()) - nc - nq;  // body constants
  const std::vector<int> fc = floating_params(body, 0, nc), fb = floating_params(body, nc, nb);
  std::vector<int> wrt = fc;
  wrt.insert(wrt.end(), fb.begin(), fb.end());
  const Program body_jvp = drop_side_effects(value_or_throw(jvp_program(body, wrt)));
  // cond: (carries, carry tangents, cond consts) -> the forward cond on the carries.
  ProgramBuilder cb(fwd.cond->name + "_jvp", fwd.cond->scope);
  std::vector<ValueId> cargs;
  for (int i = 0; i < nc; ++i) cargs.push_back(cb.add_parameter(body.params[i]));
  for (int i : fc) cb.add_parameter(body.params[i]);
  for (int i = 0; i < nq; ++i) cargs.push_back(cb.add_parameter(fwd.cond->params[nc + i]));
  std::vector<ValueId> pred = value_or_throw(inline_program(cb, *fwd.cond, cargs));
  // body: (carries, carry tangents, body consts, their tangents) -> (carries', carry tangents').
  ProgramBuilder bb(body.name + "_jvp", body.scope);
  std::vector<ValueId> primal, tangent;
  for (int i = 0; i < nc; ++i) primal.push_back(bb.add_parameter(body.params[i]));
  for (int i : fc) tangent.push_back(bb.add_parameter(body.params[i]));
  for (int i = 0; i < nb; ++i) primal.push_back(bb.add_parameter(body.params[nc + i]));
  for (int i : fb) tangent.push_back(bb.add_parameter(body.params[i]));
  std::vector<ValueId> args = primal;
  args.insert(args.end(), tangent.begin(), tangent.end());
  std::vector<ValueId> v = value_or_throw(inline_program(bb, body_jvp, args));
  std::vector<ValueId> results(v.begin(), v.begin() + nc);
  for (int i : fc) results.push_back(v[nc + i]);  // jvp_program: the results' tangents follow the results

  WhileConfig jvp;
  jvp.cond = std::make_shared<const Program>(std::move(cb).build(std::move(pred)));
  jvp.body = std::make_shared<const Program>(std::move(bb).build(std::move(results)));
  jvp.num_carry = nc + static_cast<int>(fc.size());
  jvp.num_cond_consts = nq;
  std::vector<ValueId> ops(operands.begin(), operands.begin() + nc);
  for (int i : fc) ops.push_back(tangents[i] >= 0 ? tangents[i] : b.full_like(operands[i], 0.0));
  for (int i = 0; i < nq; ++i) ops.push_back(operands[nc + i]);
  for (int i = 0; i < nb; ++i) ops.push_back(operands[nc + nq + i]);
  for (int i : fb) {
    const int op = nq + i;  // body parameter i >= nc is operand nc + nq + (i - nc)
    ops.push_back(tangents[op] >= 0 ? tangents[op] : b.full_like(operands[op], 0.0));
  }
  std::vector<ValueId> out = emit_siblings(b, OpKind::kWhile, while_attrs(jvp), ops, jvp.num_carry);
  std::vector<ValueId> result_tangents(nc, -1);
  for (size_t j = 0; j < fc.size(); ++j) result_tangents[fc[j]] = out[nc + j];
  return result_tangents;
}

std::vector<ValueId> emit_cond_jvp(ProgramBuilder& b, const Instr& instr, std::span<const ValueId> operands,
                                   std::span<const ValueId> tangents) {
  const CondConfig fwd = value_or_throw(get_cond_config(instr.attrs, instr.operands.size()));
  const int n = fwd.num_operands(operands.size());
  const size_t nb = fwd.branches.size();
  const std::vector<AbstractValue> out_types = fwd.branches[0]->result_types();
  const int nr = static_cast<int>(out_types.size());
  const std::vector<int> fo = floating_params(*fwd.branches[0], 0, n);
  CondConfig jvp;
  std::vector<ValueId> ops{operands[0]};
  for (int p = 0; p < n; ++p) ops.push_back(operands[1 + p]);
  for (int p : fo) ops.push_back(tangents[1 + p] >= 0 ? tangents[1 + p] : b.full_like(operands[1 + p], 0.0));
  for (size_t i = 0, at = 1 + n; i < nb; at += fwd.branch_consts[i], ++i) {
    const Program& branch = *fwd.branches[i];
    const int nk = static_cast<int>(fwd.branch_consts[i]);
    const std::vector<int> fk = floating_params(branch, n, nk);
    std::vector<int> wrt = fo;
    wrt.insert(wrt.end(), fk.begin(), fk.end());
    // (operands, their tangents, consts, their tangents) -> (the floating results' tangents)
    ProgramBuilder bb(branch.name + "_jvp", branch.scope);
    std::vector<ValueId> primal, tangent;
    for (int p = 0; p < n; ++p) primal.push_back(bb.add_parameter(branch.params[p]));
    for (int p : fo) tangent.push_back(bb.add_parameter(branch.params[p]));
    for (int p = n; p < n + nk; ++p) primal.push_back(bb.add_parameter(branch.params[p]));
    for (int p : fk) tangent.push_back(bb.add_parameter(branch.params[p]));
    std::vector<ValueId> results;
    if (wrt.empty()) {
      for (int y = 0; y < nr; ++y)
        if (is_floating(out_types[y].dtype)) results.push_back(zeros_of(bb, out_types[y]));
    } else {
      std::vector<ValueId> args = primal;
      args.insert(args.end(), tangent.begin(), tangent.end());
      std::vector<ValueId> v = value_or_throw(inline_program(bb, drop_side_effects(value_or_throw(jvp_program(branch, wrt))), args));
      for (int y = 0; y < nr; ++y)
        if (is_floating(out_types[y].dtype)) results.push_back(v[nr + y]);
    }
    jvp.branches.push_back(std::make_shared<const Program>(std::move(bb).build(std::move(results))));
    jvp.branch_consts.push_back(nk + static_cast<int64_t>(fk.size()));
    for (int c = 0; c < nk; ++c) ops.push_back(operands[at + c]);
    for (int p : fk) ops.push_back(tangents[at + (p - n)] >= 0 ? tangents[at + (p - n)] : b.full_like(operands[at + (p - n)], 0.0));
  }
  std::vector<ValueId> result_tangents(nr, -1);
  if (jvp.branches[0]->results.empty()) return result_tangents;
  std::vector<ValueId> out = emit_cond(b, std::move(jvp), ops);
  for (int y = 0, next = 0; y < nr; ++y)
    if (is_floating(out_types[y].dtype)) result_tangents[y] = out[next++];
  return result_tangents;
}

}  // namespace mcx::ir::internal
