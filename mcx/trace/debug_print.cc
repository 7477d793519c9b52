#include "mcx/trace/debug_print.h"

#include "mcx/ir/debug_print.h"
#include "mcx/trace/dispatch.h"
#include "mcx/trace/trace_state.h"

namespace mcx {

void debug_print(std::string_view format, const std::vector<Array>& values) {
  throw_if_error(ir::split_debug_format(format, values.size()).status());
  // In a shard_map body every device prints its own values; elsewhere the computation prints once.
  const int64_t partition = detail::current_shard_map_mesh() != nullptr ? -1 : 0;
  bind(ir::OpKind::kDebugPrint, values, ir::debug_print_attrs(format, partition));
}

}  // namespace mcx
