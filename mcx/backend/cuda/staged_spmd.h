// The SPMD ops (all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute, axis_index) of a CUDA
// program through host staging: the operand is copied to host memory through the device's pinned staging
// buffers (after the stream's earlier work), the op runs there over the execution's communicator exactly as
// on the CPU (platform/host_spmd_ops.h: the same groups, deadlines, launch check and failure handling), and
// the result is copied back to the device. It is how GPU arrays meet whatever the process layout, including
// processes that share one GPU, where NCCL refuses to run (docs/gpu.md, "Collectives").
//
// Errors: run_spmd_op_on_host's (the op's name first; DeadlineExceeded naming the missing members, Unavailable
// naming a dead process), the device's copy errors. Thread-safety: as the executable (one execution per device
// thread).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/backend/cuda/cuda_device_buffer.h"
#include "mcx/core/dtype.h"
#include "mcx/ir/program.h"
#include "mcx/platform/execution_context.h"
#include "mcx/platform/host_spmd_ops.h"

namespace mcx::cuda {

// One operand or result of a staged op in device memory.
struct StagedValue {
  const DeviceMemory* memory = nullptr;  // null for axis_index's missing operand
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
};

// Runs `instr` (an op for which is_spmd_op is true) on `device`: out = instr(operand). ctx may be null (partition
// 0 of 1). `member`: the caller's spmd_member(instr, ctx), or null (it is then found here; axis_index has none).
absl::Status run_staged_spmd_op(const ir::Instr& instr, const CudaDevice& device, const StagedValue& operand,
                                const StagedValue& out, const ExecutionContext* ctx, const SpmdMember* member,
                                absl::Time deadline);

}  // namespace mcx::cuda
