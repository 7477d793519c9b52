#include "mcx/backend/cuda/cuda_control_flow.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/cuda_executable.h"
#include "mcx/core/dims.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

using Buffers = std::vector<std::shared_ptr<const CudaDeviceBuffer>>;
using ir::OpKind;

absl::Status annotate(const absl::Status& s, OpKind kind, const std::string& where) {
  return absl::Status(s.code(), absl::StrCat("[", std::string(ir::op_name(kind)), "] ", where, ": ",
                                             std::string(s.message())));
}

Buffers concat(std::span<const std::shared_ptr<const CudaDeviceBuffer>> a,
               std::span<const std::shared_ptr<const CudaDeviceBuffer>> b) {
  Buffers out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// One run of a region. Its waits get the enclosing execution's deadline or, when that is nearer, the device
// timeout from now: a loop that keeps finishing iterations is not hung, however long it runs in all.
absl::StatusOr<Buffers> execute(const CudaExecutable& region, const Buffers& args, const ExecutionContext& ctx) {
  std::vector<const DeviceBuffer*> raw;
  for (const auto& a : args) raw.push_back(a.get());
  ExecutionContext iteration = ctx;
  MCX_ASSIGN_OR_RETURN(const absl::Time renewed, device_deadline_from_now());
  iteration.deadline = std::max(ctx.deadline, renewed);
  MCX_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const DeviceBuffer>> out, region.execute(raw, &iteration));
  Buffers results;
  for (auto& r : out) results.push_back(std::static_pointer_cast<const CudaDeviceBuffer>(std::move(r)));
  return results;
}

// Copies `bytes` from src + src_offset to dst + dst_offset on the device's stream.
absl::Status copy(const CudaDevice& device, uint64_t dst, uint64_t src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return device.check(device.api().cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src),
                                                      bytes, device.stream()),
                      "cuMemcpyDtoDAsync");
}

// The scalar x (a bool or an int32) read back to the host.
absl::StatusOr<int64_t> read_scalar(const CudaDevice& device, const CudaDeviceBuffer& x, absl::Time deadline) {
  if (x.dtype() == DType::kBool) {
    uint8_t v = 0;
    MCX_RETURN_IF_ERROR(device.to_host(&v, x.address(), 1, deadline));
    return v != 0 ? 1 : 0;
  }
  int32_t v = 0;
  MCX_RETURN_IF_ERROR(device.to_host(&v, x.address(), sizeof(v), deadline));
  return v;
}

absl::StatusOr<Buffers> run_while(const ControlFlowOp& op, std::span<const std::shared_ptr<const CudaExecutable>> regions,
                                  const CudaDevice& device, const Buffers& ops, const ExecutionContext& ctx) {
  const ir::WhileConfig& w = op.while_;
  const auto all = std::span<const std::shared_ptr<const CudaDeviceBuffer>>(ops);
  const auto cond_consts = all.subspan(w.num_carry, w.num_cond_consts);
  const auto body_consts = all.subspan(w.num_carry + w.num_cond_consts);
  Buffers carries(ops.begin(), ops.begin() + w.num_carry);
  for (int64_t it = 0;; ++it) {
    absl::StatusOr<Buffers> pred = execute(*regions[0], concat(carries, cond_consts), ctx);
    if (!pred.ok()) return annotate(pred.status(), op.kind, absl::StrCat("cond before iteration ", it));
    absl::StatusOr<absl::Time> renewed = device_deadline_from_now();
    if (!renewed.ok()) return renewed.status();
    absl::StatusOr<int64_t> go = read_scalar(device, *(*pred)[0], std::max(ctx.deadline, *renewed));
    if (!go.ok()) return annotate(go.status(), op.kind, absl::StrCat("cond before iteration ", it));
    if (*go == 0) return carries;
    absl::StatusOr<Buffers> next = execute(*regions[1], concat(carries, body_consts), ctx);
    if (!next.ok()) return annotate(next.status(), op.kind, absl::StrCat("body at iteration ", it));
    carries = *std::move(next);
  }
}

absl::StatusOr<Buffers> run_scan(const ControlFlowOp& op, std::span<const std::shared_ptr<const CudaExecutable>> regions,
                                 const CudaDevice& device, const Buffers& ops, const ExecutionContext& ctx) {
  const ir::ScanConfig& s = op.scan;
  const int nc = s.num_carry;
  const auto all = std::span<const std::shared_ptr<const CudaDeviceBuffer>>(ops);
  const auto xs = all.subspan(nc, s.num_xs);
  const auto consts = all.subspan(nc + s.num_xs);
  Buffers carries(ops.begin(), ops.begin() + nc);
  const std::vector<AbstractValue> out_types = s.body->result_types();
  std::vector<std::shared_ptr<DeviceMemory>> ys;
  std::vector<std::vector<int64_t>> y_dims;
  for (size_t j = nc; j < out_types.size(); ++j) {
    MCX_ASSIGN_OR_RETURN(std::vector<int64_t> dims, to_concrete(out_types[j].shape));
    dims.insert(dims.begin(), s.length);
    const size_t bytes = static_cast<size_t>(product(dims)) * dtype_size(out_types[j].dtype);
    MCX_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> y, DeviceMemory::allocate(device, bytes));
    ys.push_back(std::move(y));
    y_dims.push_back(std::move(dims));
  }
  for (int64_t it = 0; it < s.length; ++it) {
    const int64_t t = s.reverse ? s.length - 1 - it : it;
    Buffers args = carries;
    for (const auto& x : xs) {  // row t of x, copied
      std::vector<int64_t> dims(x->dims().begin() + 1, x->dims().end());
      const size_t bytes = static_cast<size_t>(product(dims)) * dtype_size(x->dtype());
      MCX_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> row, DeviceMemory::allocate(device, bytes));
      MCX_RETURN_IF_ERROR(copy(device, row->address(), x->address() + t * bytes, bytes));
      args.push_back(std::make_shared<CudaDeviceBuffer>(x->dtype(), std::move(dims), std::move(row)));
    }
    args.insert(args.end(), consts.begin(), consts.end());
    absl::StatusOr<Buffers> out = execute(*regions[0], args, ctx);
    if (!out.ok()) return annotate(out.status(), op.kind, absl::StrCat("body at iteration ", t));
    for (int i = 0; i < nc; ++i) carries[i] = (*out)[i];
    for (size_t j = 0; j < ys.size(); ++j) {
      const CudaDeviceBuffer& row = *(*out)[nc + j];
      const size_t bytes = static_cast<size_t>(product(row.dims())) * dtype_size(row.dtype());
      MCX_RETURN_IF_ERROR(copy(device, ys[j]->address() + t * bytes, row.address(), bytes));
    }
  }
  for (size_t j = 0; j < ys.size(); ++j) {
    carries.push_back(std::make_shared<CudaDeviceBuffer>(out_types[nc + j].dtype, y_dims[j], ys[j]));
  }
  return carries;
}

absl::StatusOr<Buffers> run_cond(const ControlFlowOp& op, std::span<const std::shared_ptr<const CudaExecutable>> regions,
                                 const CudaDevice& device, const Buffers& ops, const ExecutionContext& ctx) {
  MCX_ASSIGN_OR_RETURN(const int64_t raw, read_scalar(device, *ops[0], ctx.deadline));
  const int64_t n = static_cast<int64_t>(regions.size());
  const int64_t index = std::clamp<int64_t>(raw, 0, n - 1);
  const int shared = op.cond.num_operands(ops.size());
  size_t first_const = 1 + shared;
  for (int64_t b = 0; b < index; ++b) first_const += op.cond.branch_consts[b];
  Buffers args(ops.begin() + 1, ops.begin() + 1 + shared);
  args.insert(args.end(), ops.begin() + first_const, ops.begin() + first_const + op.cond.branch_consts[index]);
  absl::StatusOr<Buffers> out = execute(*regions[index], args, ctx);
  if (!out.ok()) return annotate(out.status(), op.kind, absl::StrCat("branch ", index));
  return out;
}

}  // namespace

absl::StatusOr<ControlFlowOp> ControlFlowOp::of(const ir::Instr& instr) {
  ControlFlowOp op;
  op.kind = instr.kind;
  const size_t n = instr.operands.size();
  switch (instr.kind) {
    case OpKind::kWhile: {
      MCX_ASSIGN_OR_RETURN(op.while_, ir::get_while_config(instr.attrs, n));
      op.num_results = op.while_.num_carry;
      break;
    }
    case OpKind::kScan: {
      MCX_ASSIGN_OR_RETURN(op.scan, ir::get_scan_config(instr.attrs, n));
      op.num_results = static_cast<int>(op.scan.body->results.size());
      break;
    }
    case OpKind::kCond: {
      MCX_ASSIGN_OR_RETURN(op.cond, ir::get_cond_config(instr.attrs, n));
      op.num_results = static_cast<int>(op.cond.branches[0]->results.size());
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("[cuda_compile] ", std::string(ir::op_name(instr.kind)),
                                                     " is not a control-flow op"));
  }
  return op;
}

ir::Regions ControlFlowOp::regions() const {
  switch (kind) {
    case OpKind::kWhile: return {while_.cond, while_.body};
    case OpKind::kScan: return {scan.body};
    default: return cond.branches;
  }
}

absl::StatusOr<std::vector<std::shared_ptr<const CudaDeviceBuffer>>> run_control_flow(
    const ControlFlowOp& op, std::span<const std::shared_ptr<const CudaExecutable>> regions, const CudaDevice& device,
    std::vector<std::shared_ptr<const CudaDeviceBuffer>> operands, const ExecutionContext& ctx) {
  switch (op.kind) {
    case OpKind::kWhile: return run_while(op, regions, device, operands, ctx);
    case OpKind::kScan: return run_scan(op, regions, device, operands, ctx);
    default: return run_cond(op, regions, device, operands, ctx);
  }
}

}  // namespace mcx::cuda
