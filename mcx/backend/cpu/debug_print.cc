#include "mcx/backend/cpu/debug_print.h"

#include <string>
#include <vector>

#include "mcx/core/debug_output.h"
#include "mcx/core/error.h"
#include "mcx/ir/debug_print.h"

namespace mcx::cpu {

absl::StatusOr<Buffer> run_debug_print(const ir::Instr& instr, std::span<const Buffer> operands,
                                       const ExecutionContext* ctx) {
  MCX_ASSIGN_OR_RETURN(int64_t partition, instr.attrs.get_int("partition"));
  const int self = ctx ? ctx->partition_id : 0;
  if (partition < 0 || partition == self) {
    MCX_ASSIGN_OR_RETURN(std::string format, ir::get_debug_format(instr.attrs));
    MCX_ASSIGN_OR_RETURN(std::vector<std::string> pieces, ir::split_debug_format(format, operands.size()));
    std::string line = pieces[0];
    for (size_t i = 0; i < operands.size(); ++i) {
      line += operands[i].to_nested_string();
      line += pieces[i + 1];
    }
    write_debug_print(line);
  }
  return Buffer::scalar<int32_t>(0);
}

}  // namespace mcx::cpu
