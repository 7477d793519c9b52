// The control-flow ops (ir/control_flow.h: while, scan, cond) on a GPU. Each group of sibling instructions is
// one step of the enclosing executable's plan; its regions are CudaExecutables compiled (and serialised) with
// the enclosing one. The host drives the loop: a while's predicate and a cond's branch index are read back to
// the host (a one-element copy, which waits for the work before it), and each region runs as an execution of
// its own on the same device and stream; a scan's slices of xs and rows of ys are device-to-device copies.
// Nothing is traced or compiled per iteration. Private to the CUDA backend.
// Thread-safety: run_control_flow may run concurrently (it keeps no state).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/cuda_device_buffer.h"
#include "mcx/ir/control_flow.h"
#include "mcx/ir/op.h"
#include "mcx/platform/execution_context.h"

namespace mcx::cuda {

class CudaExecutable;

// A control-flow op of a plan: its kind and decoded attributes (the one of while_, scan, cond that kind says).
struct ControlFlowOp {
  ir::OpKind kind;
  ir::WhileConfig while_;
  ir::ScanConfig scan;
  ir::CondConfig cond;
  int num_results = 0;

  // Decodes instr's attributes. InvalidArgument for an instruction that is not a well-formed while, scan or cond.
  static absl::StatusOr<ControlFlowOp> of(const ir::Instr& instr);
  // The regions in the order run_control_flow takes their executables (while: cond, body; scan: body; cond:
  // each branch).
  ir::Regions regions() const;
};

// Every result of op (in `result` order) for its operands on `device`. ctx's local_device is the device's
// index; each wait is bounded by its deadline or the device timeout from the wait's region run, whichever is
// later (a long loop is not a hung one). Errors of a region's execution name the op and the iteration or branch.
absl::StatusOr<std::vector<std::shared_ptr<const CudaDeviceBuffer>>> run_control_flow(
    const ControlFlowOp& op, std::span<const std::shared_ptr<const CudaExecutable>> regions, const CudaDevice& device,
    std::vector<std::shared_ptr<const CudaDeviceBuffer>> operands, const ExecutionContext& ctx);

}  // namespace mcx::cuda
