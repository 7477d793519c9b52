#include "mcx/backend/cpu/control_flow.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"

namespace mcx::cpu {
namespace {

using ir::OpKind;

// Row t of x (leading dim sliced away), copied.
Buffer row_of(const Buffer& x, int64_t t) {
  std::vector<int64_t> dims(x.dims().begin() + 1, x.dims().end());
  Buffer row = Buffer::uninitialized(x.dtype(), std::move(dims));
  const size_t n = row.nbytes();
  if (n > 0) std::memcpy(row.mutable_data(), static_cast<const std::byte*>(x.data()) + t * n, n);
  return row;
}

void write_row(Buffer& stacked, int64_t t, const Buffer& row) {
  const size_t n = row.nbytes();
  if (n > 0) std::memcpy(static_cast<std::byte*>(stacked.mutable_data()) + t * n, row.data(), n);
}

std::vector<Buffer> concat(std::span<const Buffer> a, std::span<const Buffer> b) {
  std::vector<Buffer> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

absl::Status annotate(const absl::Status& s, OpKind kind, const std::string& where) {
  return absl::Status(s.code(), absl::StrCat("[", std::string(ir::op_name(kind)), "] ", where, ": ",
                                             std::string(s.message())));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ControlFlowRunner>> ControlFlowRunner::compile(
    const ir::Instr& instr, std::span<const AbstractValue> operands, const RegionCompiler& compile_region) {
  auto r = std::shared_ptr<ControlFlowRunner>(new ControlFlowRunner());
  r->kind_ = instr.kind;
  ir::Regions regions;
  switch (instr.kind) {
    case OpKind::kWhile: {
      MCX_ASSIGN_OR_RETURN(r->while_, ir::get_while_config(instr.attrs, operands.size()));
      regions = {r->while_.cond, r->while_.body};
      r->num_results_ = r->while_.num_carry;
      break;
    }
    case OpKind::kScan: {
      MCX_ASSIGN_OR_RETURN(r->scan_, ir::get_scan_config(instr.attrs, operands.size()));
      regions = {r->scan_.body};
      r->num_results_ = static_cast<int>(r->scan_.body->results.size());
      break;
    }
    case OpKind::kCond: {
      MCX_ASSIGN_OR_RETURN(r->cond_, ir::get_cond_config(instr.attrs, operands.size()));
      regions = r->cond_.branches;
      r->num_results_ = static_cast<int>(r->cond_.branches[0]->results.size());
      break;
    }
    default:
      return absl::InternalError(absl::StrCat("[cpu_compile] ", std::string(ir::op_name(instr.kind)),
                                              " is not a control-flow op"));
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    auto e = compile_region ? compile_region(static_cast<int>(i), *regions[i]) : CpuExecutable::compile(*regions[i]);
    if (!e.ok()) return annotate(e.status(), instr.kind, absl::StrCat("region ", i, " (@", regions[i]->name, ")"));
    r->regions_.push_back(*std::move(e));
  }
  return std::shared_ptr<const ControlFlowRunner>(std::move(r));
}

bool ControlFlowRunner::has_collectives() const {
  return std::any_of(regions_.begin(), regions_.end(), [](const auto& e) { return e->has_collectives(); });
}

absl::StatusOr<std::vector<Buffer>> ControlFlowRunner::run(std::span<const Buffer> operands,
                                                           const ExecutionContext* ctx) const {
  switch (kind_) {
    case OpKind::kWhile: return run_while(operands, ctx);
    case OpKind::kScan: return run_scan(operands, ctx);
    default: return run_cond(operands, ctx);
  }
}

absl::StatusOr<std::vector<Buffer>> ControlFlowRunner::run_while(std::span<const Buffer> ops,
                                                                 const ExecutionContext* ctx) const {
  const auto cond_consts = ops.subspan(while_.num_carry, while_.num_cond_consts);
  const auto body_consts = ops.subspan(while_.num_carry + while_.num_cond_consts);
  std::vector<Buffer> carries(ops.begin(), ops.begin() + while_.num_carry);
  for (int64_t it = 0;; ++it) {
    auto pred = regions_[0]->execute(concat(carries, cond_consts), ctx);
    if (!pred.ok()) return annotate(pred.status(), kind_, absl::StrCat("cond before iteration ", it));
    if (!*static_cast<const bool*>((*pred)[0].data())) return carries;
    auto next = regions_[1]->execute(concat(carries, body_consts), ctx);
    if (!next.ok()) return annotate(next.status(), kind_, absl::StrCat("body at iteration ", it));
    carries = *std::move(next);
  }
}

absl::StatusOr<std::vector<Buffer>> ControlFlowRunner::run_scan(std::span<const Buffer> ops,
                                                                const ExecutionContext* ctx) const {
  const int nc = scan_.num_carry;
  const auto xs = ops.subspan(nc, scan_.num_xs);
  const auto consts = ops.subspan(nc + scan_.num_xs);
  std::vector<Buffer> carries(ops.begin(), ops.begin() + nc);
  const std::vector<AbstractValue> out_types = scan_.body->result_types();
  std::vector<Buffer> ys;
  for (size_t j = nc; j < out_types.size(); ++j) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, to_concrete(out_types[j].shape));
    dims.insert(dims.begin(), scan_.length);
    ys.push_back(Buffer::uninitialized(out_types[j].dtype, std::move(dims)));
  }
  std::vector<Buffer> args;
  for (int64_t it = 0; it < scan_.length; ++it) {
    const int64_t t = scan_.reverse ? scan_.length - 1 - it : it;
    args.assign(carries.begin(), carries.end());
    for (const Buffer& x : xs) args.push_back(row_of(x, t));
    args.insert(args.end(), consts.begin(), consts.end());
    auto out = regions_[0]->execute(args, ctx);
    if (!out.ok()) return annotate(out.status(), kind_, absl::StrCat("body at iteration ", t));
    for (int i = 0; i < nc; ++i) carries[i] = std::move((*out)[i]);
    for (size_t j = 0; j < ys.size(); ++j) write_row(ys[j], t, (*out)[nc + j]);
  }
  carries.insert(carries.end(), std::make_move_iterator(ys.begin()), std::make_move_iterator(ys.end()));
  return carries;
}

absl::StatusOr<std::vector<Buffer>> ControlFlowRunner::run_cond(std::span<const Buffer> ops,
                                                                const ExecutionContext* ctx) const {
  const int64_t n = static_cast<int64_t>(regions_.size());
  const int64_t index = std::clamp<int64_t>(*static_cast<const int32_t*>(ops[0].data()), 0, n - 1);
  const int shared = cond_.num_operands(ops.size());
  size_t first_const = 1 + shared;
  for (int64_t b = 0; b < index; ++b) first_const += cond_.branch_consts[b];
  std::vector<Buffer> args(ops.begin() + 1, ops.begin() + 1 + shared);
  const auto consts = ops.subspan(first_const, cond_.branch_consts[index]);
  args.insert(args.end(), consts.begin(), consts.end());
  auto out = regions_[index]->execute(args, ctx);
  if (!out.ok()) return annotate(out.status(), kind_, absl::StrCat("branch ", index));
  return out;
}

}  // namespace mcx::cpu
