// The CPU kernel of debug_print (ir/debug_print.h): formats the operands' values into the op's format and
// hands the line to the debug-print sink (core/debug_output.h), when this partition is the one the op
// names (or it names every partition). A step of the plan, so lines come in program order per device.
// Thread-safety: reentrant.
#pragma once

#include <span>

#include "absl/status/statusor.h"
#include "mcx/backend/cpu/executable.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::cpu {

// Returns the op's i32[] zero. InvalidArgument (naming the op) for a malformed format.
absl::StatusOr<Buffer> run_debug_print(const ir::Instr& instr, std::span<const Buffer> operands,
                                       const ExecutionContext* ctx);

}  // namespace mcx::cpu
