// The plan a CudaExecutable runs (cuda_executable.h), private to the CUDA backend: plan_program turns a program
// into steps over slots (the program's values, then temporaries the plan adds) and the kernels they launch,
// which CudaExecutable::compile generates and CudaExecutable::deserialize reads back instead. The platform-
// neutral decision of what fuses is kernelgen's (element_groups.h); what runs as which kernel is here, each op
// family in its own file (cuda_plan_steps.h).
// Thread-safety: plain data; plan_program is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/backend/cuda/codegen/kernel_source.h"
#include "mcx/backend/cuda/cuda_control_flow.h"
#include "mcx/backend/cuda/cuda_executable.h"
#include "mcx/backend/cuda/gemm.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::cuda {

// Slots: the program's values, then temporaries the plan adds (operands of a product laid out for cuBLASLt).
struct CudaExecutable::Plan {
  using ValueId = ir::ValueId;
  struct Step {
    enum class Kind {
      kKernel,  // a generated kernel over n elements: inputs' and outputs' device pointers, scalars, then n
      kAlias,   // `value` takes the memory of `source` (a reshape)
      kGemm,    // outputs[0] = inputs[0] . inputs[1] as `gemm` (gemm.h)
      kControlFlow,  // outputs (every sibling's result) = control_flows[control_flow] run on inputs
      kDebugPrint,   // the inputs copied to the host and printed as program.instrs[instr] says; outputs[0] = 0
      kSpmd,         // outputs[0] = the SPMD op program.instrs[instr] on inputs (none or one): over NCCL or through
                     // host staging (nccl_spmd.h)
    };
    Kind kind = Kind::kKernel;
    bool allocate_outputs = true;  // false: the kernel writes into outputs an earlier step allocated
    ValueId value = -1;
    ValueId source = -1;
    int kernel = -1;
    int control_flow = -1;
    int instr = -1;
    GemmShape gemm;
    std::vector<ValueId> inputs;
    std::vector<ValueId> outputs;
    int64_t n = 0;
    std::vector<int64_t> scalars;  // kernel parameters after the pointers, before n (i64 each)
    std::vector<ValueId> release;  // slots read for the last time here
  };
  ir::Program program;
  std::vector<std::vector<int64_t>> dims;  // per slot
  std::vector<DType> dtypes;               // per slot
  std::map<ValueId, Buffer> constants;
  std::vector<Step> steps;
  std::vector<ControlFlowOp> control_flows;

  // A new temporary slot.
  ValueId add_slot(DType dtype, std::vector<int64_t> slot_dims) {
    dims.push_back(std::move(slot_dims));
    dtypes.push_back(dtype);
    return static_cast<ValueId>(dims.size() - 1);
  }
};


using codegen::KernelSource;

// The plan of `program` and the kernels its steps launch (Step::kernel indexes them). Errors: InvalidArgument
// for a program that fails verification, has symbolic shapes or holds a shard_map; Unimplemented naming the
// instruction, the op and the platform for an op with no CUDA kernel.
absl::StatusOr<std::pair<std::unique_ptr<CudaExecutable::Plan>, std::vector<KernelSource>>> plan_program(
    const ir::Program& program);

}  // namespace mcx::cuda
