#include "mcx/backend/cuda/staged_spmd.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/platform/host_spmd_ops.h"

namespace mcx::cuda {
namespace {

// Names the path once per process, when the first staged collective runs.
void log_first_use(const ir::Instr& instr, const CudaDevice& device) {
  static std::atomic<bool> logged{false};
  if (logged.exchange(true)) return;
  log_info("[cuda] first collective through host staging: {} on {} (operand copied to pinned host memory, combined "
           "over the process's communicators, copied back)",
           std::string(ir::op_name(instr.kind)), device.label());
}

}  // namespace

absl::Status run_staged_spmd_op(const ir::Instr& instr, const CudaDevice& device, const StagedValue& operand,
                                const StagedValue& out, const ExecutionContext* ctx, const SpmdMember* member,
                                absl::Time deadline) {
  if (!is_spmd_op(instr.kind)) {
    return absl::InternalError(absl::StrCat("[cuda] ", std::string(ir::op_name(instr.kind)), " is not an SPMD op"));
  }
  if (out.memory == nullptr) return absl::InternalError("[cuda] a staged SPMD op without its result's memory");
  if (instr.kind != ir::OpKind::kAxisIndex) log_first_use(instr, device);  // axis_index moves nothing
  Buffer host_operand;
  HostOperand in;
  if (operand.memory != nullptr) {
    host_operand = Buffer::uninitialized(operand.dtype, operand.dims);
    if (host_operand.nbytes() > 0) {
      MCX_RETURN_IF_ERROR(
          device.to_host(host_operand.mutable_data(), operand.memory->address(), host_operand.nbytes(), deadline));
    }
    in = {host_operand.data(), operand.dims};
  }
  MCX_ASSIGN_OR_RETURN(const Buffer result, run_spmd_op_on_host(instr, in, out.dims, ctx, member));
  if (result.nbytes() != out.memory->bytes()) {
    return absl::InternalError(absl::StrCat("[cuda] ", std::string(ir::op_name(instr.kind)), " gave ",
                                            result.nbytes(), " bytes for a result of ", out.memory->bytes()));
  }
  if (result.nbytes() > 0) {
    MCX_RETURN_IF_ERROR(device.to_device(out.memory->address(), result.data(), result.nbytes(), deadline));
  }
  return absl::OkStatus();
}

}  // namespace mcx::cuda
