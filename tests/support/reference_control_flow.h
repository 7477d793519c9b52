// The reference evaluator's control flow (op.h: while, scan, cond): every result of the op, computed by
// running its regions through reference_evaluate iteration by iteration. Part of reference_eval.h's oracle;
// shares no code with the backend.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/program.h"

namespace mcx::test {

absl::StatusOr<std::vector<Buffer>> reference_control_flow(const ir::Instr& instr, std::span<const Buffer> operands);

}  // namespace mcx::test
