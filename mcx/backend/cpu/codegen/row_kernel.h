// Machine code for whole row regions (docs/codegen.md "Row kernels"): a RowProgram (row_program.h: softmax,
// log-softmax, layer norm and the like, every value a row scalar or a full row) emitted as one LLVM function
// that runs its stages row after row. A row's reductions, element-wise stages and broadcasts of its scalars
// happen while the row is in L1: row scalars stay in registers, a full intermediate in one row of scratch,
// and nothing is gathered or broadcast into memory. Element-wise stages are vectorised loops over the row
// with the fused kernels' per-node rules (element_emitter.h); reductions are written out in the interpreter's
// accumulation order (reduce_fastmath.cc: 16 lanes combined pairwise; max and min with the host ISA's vector
// width and four accumulators; rows longer than 8192 in chunks), so results equal the step-by-step region
// bit for bit. The step-by-step region stays the reference and the fallback.
//
// Thread-safety: every function here is thread-safe; kernels are shared by signature (as fused kernels are:
// kernel_registry.h) and stay mapped until the process exits.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/codegen/fused_kernel.h"
#include "mcx/backend/cpu/row_program.h"

namespace mcx::cpu::codegen {

// Why rp cannot be generated, or "" when it can (a stage's group the fused generator does not take).
std::string row_unsupported_reason(const RowProgram& rp);

// A canonical description of rp without its cols (values, stages, outputs): equal signatures share a kernel.
std::string row_signature(const RowProgram& rp);

// rp's kernel (its code is a RowKernelFn): from this process, the kernel store, another process of the job,
// or compiled, exactly as compile_fused. Errors as compile_fused.
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> compile_rows(const RowProgram& rp);

// rp's kernel linked from a serialised executable's object (as load_fused).
absl::StatusOr<std::shared_ptr<const GeneratedKernel>> load_rows(const RowProgram& rp, std::string_view object);

}  // namespace mcx::cpu::codegen
