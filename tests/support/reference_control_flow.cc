#include "tests/support/reference_control_flow.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/ir/control_flow.h"
#include "tests/support/reference_eval.h"

namespace mcx::test {
namespace {

using ir::OpKind;

std::vector<Buffer> join(std::span<const Buffer> a, std::span<const Buffer> b) {
  std::vector<Buffer> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Element k (along dim 0) of x, and the stacking of such elements; plain byte copies.
Buffer element(const Buffer& x, int64_t k) {
  Buffer e = Buffer::zeros(x.dtype(), std::vector<int64_t>(x.dims().begin() + 1, x.dims().end()));
  std::memcpy(e.mutable_data(), static_cast<const char*>(x.data()) + k * e.nbytes(), e.nbytes());
  return e;
}

Buffer stack(const std::vector<Buffer>& rows, const AbstractValue& row_type, int64_t n) {
  std::vector<int64_t> dims = to_concrete(row_type.shape).value();
  dims.insert(dims.begin(), n);
  Buffer out = Buffer::zeros(row_type.dtype, dims);
  for (int64_t k = 0; k < n; ++k)
    std::memcpy(static_cast<char*>(out.mutable_data()) + k * rows[k].nbytes(), rows[k].data(), rows[k].nbytes());
  return out;
}

absl::StatusOr<std::vector<Buffer>> run_while(const ir::WhileConfig& c, std::span<const Buffer> ops) {
  std::vector<Buffer> carries(ops.begin(), ops.begin() + c.num_carry);
  const auto cond_consts = ops.subspan(c.num_carry, c.num_cond_consts);
  const auto body_consts = ops.subspan(c.num_carry + c.num_cond_consts);
  for (;;) {
    MCX_ASSIGN_OR_RETURN(std::vector<Buffer> pred, reference_evaluate(*c.cond, join(carries, cond_consts)));
    if (!pred[0].data<bool>()[0]) return carries;
    MCX_ASSIGN_OR_RETURN(carries, reference_evaluate(*c.body, join(carries, body_consts)));
  }
}

absl::StatusOr<std::vector<Buffer>> run_scan(const ir::ScanConfig& c, std::span<const Buffer> ops) {
  std::vector<Buffer> carries(ops.begin(), ops.begin() + c.num_carry);
  const auto xs = ops.subspan(c.num_carry, c.num_xs);
  const auto consts = ops.subspan(c.num_carry + c.num_xs);
  const std::vector<AbstractValue> types = c.body->result_types();
  std::vector<std::vector<Buffer>> ys(types.size() - c.num_carry, std::vector<Buffer>(c.length));
  for (int64_t i = 0; i < c.length; ++i) {
    const int64_t t = c.reverse ? c.length - 1 - i : i;
    std::vector<Buffer> args = carries;
    for (const Buffer& x : xs) args.push_back(element(x, t));
    args.insert(args.end(), consts.begin(), consts.end());
    MCX_ASSIGN_OR_RETURN(std::vector<Buffer> out, reference_evaluate(*c.body, args));
    for (int k = 0; k < c.num_carry; ++k) carries[k] = out[k];
    for (size_t j = 0; j < ys.size(); ++j) ys[j][t] = out[c.num_carry + j];
  }
  for (size_t j = 0; j < ys.size(); ++j) carries.push_back(stack(ys[j], types[c.num_carry + j], c.length));
  return carries;
}

absl::StatusOr<std::vector<Buffer>> run_cond(const ir::CondConfig& c, std::span<const Buffer> ops) {
  const int64_t n = static_cast<int64_t>(c.branches.size());
  const int64_t index = std::clamp<int64_t>(ops[0].data<int32_t>()[0], 0, n - 1);
  const int shared = c.num_operands(ops.size());
  int64_t first = 1 + shared;
  for (int64_t b = 0; b < index; ++b) first += c.branch_consts[b];
  return reference_evaluate(*c.branches[index],
                            join(ops.subspan(1, shared), ops.subspan(first, c.branch_consts[index])));
}

}  // namespace

absl::StatusOr<std::vector<Buffer>> reference_control_flow(const ir::Instr& in, std::span<const Buffer> ops) {
  switch (in.kind) {
    case OpKind::kWhile: {
      MCX_ASSIGN_OR_RETURN(ir::WhileConfig c, ir::get_while_config(in.attrs, ops.size()));
      return run_while(c, ops);
    }
    case OpKind::kScan: {
      MCX_ASSIGN_OR_RETURN(ir::ScanConfig c, ir::get_scan_config(in.attrs, ops.size()));
      return run_scan(c, ops);
    }
    case OpKind::kCond: {
      MCX_ASSIGN_OR_RETURN(ir::CondConfig c, ir::get_cond_config(in.attrs, ops.size()));
      return run_cond(c, ops);
    }
    case OpKind::kCustomVjpCall: {  // fun on (args..., fun consts...), the rule aside
      MCX_ASSIGN_OR_RETURN(ir::CustomVjpConfig c, ir::get_custom_vjp_config(in.attrs, ops.size()));
      return reference_evaluate(*c.fun, join(ops.subspan(0, c.num_args), ops.subspan(c.num_args, c.region_consts[0])));
    }
    case OpKind::kCustomJvpCall: {
      MCX_ASSIGN_OR_RETURN(ir::CustomJvpConfig c, ir::get_custom_jvp_config(in.attrs, ops.size()));
      return reference_evaluate(*c.fun, join(ops.subspan(0, c.num_args), ops.subspan(c.num_args, c.region_consts[0])));
    }
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("[reference_evaluate] ", std::string(ir::op_name(in.kind)),
                                                 " is not an op with regions"));
}

}  // namespace mcx::test
