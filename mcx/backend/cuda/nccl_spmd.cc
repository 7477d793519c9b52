#include "mcx/backend/cuda/nccl_spmd.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mcx/backend/cuda/nccl_communicator.h"
#include "mcx/core/dims.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/ir/spmd_rules.h"
#include "mcx/platform/host_spmd_ops.h"

namespace mcx::cuda {

using ir::OpKind;

namespace {

int64_t leading(const std::vector<int64_t>& dims, int64_t dim) {
  int64_t n = 1;
  for (int64_t i = 0; i < dim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

// Logs the first message of each kind ("nccl", "staging") at info, later ones at debug.
void log_path(const std::string& kind, const std::string& message) {
  static Mutex mu;
  static std::set<std::string>* seen = new std::set<std::string>();
  bool first = false;
  {
    MutexLock lock(&mu);
    first = seen->insert(kind).second;
  }
  if (first) {
    log_info("[cuda] {}", message);
  } else {
    log_debug("[cuda] {}", message);
  }
}

// The group's agreement, attached to the host member.
absl::StatusOr<NcclCommunicator*> group_nccl(const CudaDevice& device, Communicator& host, absl::Time deadline) {
  MCX_ASSIGN_OR_RETURN(
      NcclCommunicator::Created * created,
      host.attachment<NcclCommunicator::Created>("nccl", [&]() -> absl::StatusOr<std::unique_ptr<NcclCommunicator::Created>> {
        MCX_ASSIGN_OR_RETURN(NcclCommunicator::Created made, NcclCommunicator::create(device, host, deadline));
        if (made.comm != nullptr) {
          log_path("nccl", absl::StrCat("collectives of GPU arrays run device to device over NCCL (",
                                made.comm->description(), ")"));
        } else {
          log_path("staging", absl::StrCat("collectives of GPU arrays run through host staging: ", made.staging_reason));
        }
        return std::make_unique<NcclCommunicator::Created>(std::move(made));
      }));
  return created->comm.get();
}

// A copy on the device: a group of one, or a permute in which this member receives its own value.
absl::Status copy_on_device(const CudaDevice& device, const StagedValue& from, const StagedValue& to) {
  MCX_RETURN_IF_ERROR(device.make_current());
  if (to.memory->bytes() == 0) return absl::OkStatus();
  return device.check(device.api().cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(to.memory->address()),
                                                     static_cast<CUdeviceptr>(from.memory->address()),
                                                     to.memory->bytes(), device.stream()),
                      "cuMemcpyDtoDAsync (a collective of one member)");
}

absl::Status zero_on_device(const CudaDevice& device, const StagedValue& value) {
  MCX_RETURN_IF_ERROR(device.make_current());
  if (value.memory->bytes() == 0) return absl::OkStatus();
  return device.check(device.api().cuMemsetD8Async(static_cast<CUdeviceptr>(value.memory->address()), 0,
                                                   value.memory->bytes(), device.stream()),
                      "cuMemsetD8Async (a permute's result)");
}

// Whether NCCL can run the op as mcx defines it, from the op and its dims alone (the same on every member).
absl::StatusOr<bool> nccl_can_run(const ir::Instr& instr, const StagedValue& operand, int64_t group_size) {
  const std::string_view name = ir::op_name(instr.kind);
  switch (instr.kind) {
    case OpKind::kAllReduce: {
      MCX_ASSIGN_OR_RETURN(const ReduceOp op, ir::get_reduce_op(name, instr.attrs));
      return nccl_reduction_type(operand.dtype, op).has_value();
    }
    case OpKind::kAllGather: {
      MCX_ASSIGN_OR_RETURN(const int64_t d, instr.attrs.get_int("dimension"));
      return leading(operand.dims, d) == 1;
    }
    case OpKind::kReduceScatter: {
      MCX_ASSIGN_OR_RETURN(const ReduceOp op, ir::get_reduce_op(name, instr.attrs));
      MCX_ASSIGN_OR_RETURN(const int64_t d, instr.attrs.get_int("dimension"));
      return leading(operand.dims, d) == 1 && nccl_reduction_type(operand.dtype, op).has_value();
    }
    case OpKind::kAllToAll: {
      MCX_ASSIGN_OR_RETURN(const int64_t sd, instr.attrs.get_int("split_dimension"));
      MCX_ASSIGN_OR_RETURN(const int64_t cd, instr.attrs.get_int("concat_dimension"));
      std::vector<int64_t> block = operand.dims;
      block[static_cast<size_t>(sd)] /= group_size;
      return leading(operand.dims, sd) == 1 && leading(block, cd) == 1;
    }
    case OpKind::kCollectivePermute: return true;
    default: return false;
  }
}

bool is_reduction(OpKind k) { return k == OpKind::kAllReduce || k == OpKind::kReduceScatter; }

absl::Status run_on(NcclCommunicator& nccl, const ir::Instr& instr, const SpmdMember& m, const StagedValue& operand,
                    const StagedValue& out, absl::Time deadline) {
  const std::string_view name = ir::op_name(instr.kind);
  const uint64_t in = operand.memory->address(), to = out.memory->address();
  const int64_t bytes = static_cast<int64_t>(operand.memory->bytes());
  const int64_t g = static_cast<int64_t>(m.group.size());
  switch (instr.kind) {
    case OpKind::kAllReduce: {
      MCX_ASSIGN_OR_RETURN(const ReduceOp op, ir::get_reduce_op(name, instr.attrs));
      return nccl.all_reduce(in, to, product(operand.dims), *nccl_reduction_type(operand.dtype, op), op, deadline);
    }
    case OpKind::kAllGather: return nccl.all_gather(in, to, bytes, deadline);
    case OpKind::kReduceScatter: {
      MCX_ASSIGN_OR_RETURN(const ReduceOp op, ir::get_reduce_op(name, instr.attrs));
      return nccl.reduce_scatter(in, to, product(operand.dims) / g, *nccl_reduction_type(operand.dtype, op), op,
                                 deadline);
    }
    case OpKind::kAllToAll: return nccl.all_to_all(in, to, bytes / g, deadline);
    case OpKind::kCollectivePermute: return nccl.permute(in, to, bytes, m.send_to, m.recv_from, deadline);
    default: break;
  }
  return absl::InternalError(absl::StrCat("[cuda] ", std::string(name), " has no NCCL form"));
}

absl::StatusOr<bool> run_on_device(const ir::Instr& instr, const CudaDevice& device, const SpmdMember& m,
                                   const StagedValue& operand, const StagedValue& out, absl::Time deadline) {
  if (m.comm == nullptr) {  // a group of one, or a permute that moves nothing
    if (instr.kind != OpKind::kCollectivePermute) {
      MCX_RETURN_IF_ERROR(copy_on_device(device, operand, out));
    } else if (m.recv_from == 0) {
      MCX_RETURN_IF_ERROR(copy_on_device(device, operand, out));
    } else {
      MCX_RETURN_IF_ERROR(zero_on_device(device, out));
    }
    return true;
  }
  MCX_ASSIGN_OR_RETURN(const bool can, nccl_can_run(instr, operand, static_cast<int64_t>(m.group.size())));
  if (!can) return false;
  MCX_ASSIGN_OR_RETURN(NcclCommunicator * nccl, group_nccl(device, *m.comm, deadline));
  if (nccl == nullptr || (is_reduction(instr.kind) && !nccl->reductions())) return false;
  MCX_RETURN_IF_ERROR(m.comm->check_launch(deadline));
  if (instr.kind == OpKind::kCollectivePermute && m.recv_from < 0) MCX_RETURN_IF_ERROR(zero_on_device(device, out));
  MCX_RETURN_IF_ERROR(run_on(*nccl, instr, m, operand, out, deadline));
  return true;
}

}  // namespace

absl::StatusOr<bool> run_spmd_op_on_device(const ir::Instr& instr, const CudaDevice& device, const SpmdMember& member,
                                           const StagedValue& operand, const StagedValue& out,
                                           const ExecutionContext* ctx, absl::Time deadline) {
  if (instr.kind == OpKind::kAxisIndex || operand.memory == nullptr || out.memory == nullptr) return false;
  absl::StatusOr<bool> done = run_on_device(instr, device, member, operand, out, deadline);
  if (done.ok()) return done;
  return with_message(done.status(), absl::StrCat("[", std::string(ir::op_name(instr.kind)), "] partition ",
                                                  ctx != nullptr ? ctx->partition_id : 0, " of ",
                                                  ctx != nullptr ? ctx->num_partitions : 1, ": ",
                                                  done.status().message()));
}

}  // namespace mcx::cuda
