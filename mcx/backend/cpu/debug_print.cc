#include "mcx/backend/cpu/debug_print.h"

#include <string>
#include <vector>

#include "mcx/core/debug_output.h"
#include "mcx/core/error.h"
#include "mcx/ir/debug_print.h"

namespace mcx::cpu {

absl::StatusOr<Buffer> run_debug_print(const ir::Instr& instr, std::span<const Buffer> operands,
                                       const ExecutionContext* ctx) {
  MCX_ASSIGN_OR_RETURN(const std::optional<std::string> line,
                       ir::debug_print_line(instr.attrs, operands, ctx != nullptr ? ctx->partition_id : 0));
  if (line.has_value()) write_debug_print(*line);
  return Buffer::scalar<int32_t>(0);
}

}  // namespace mcx::cpu
