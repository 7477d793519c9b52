// The debug_print op (opset 9, op.h): prints its operands' values from inside a program, when it runs.
//
// Attributes: `format` (Buffer u8[n]: the UTF-8 format text, with one "{}" placeholder per operand and
// "{{" / "}}" for literal braces) and `partition` (int: -1 prints on every device that runs it, as in a
// shard_map body; p >= 0 prints on partition p only, so that a partitioned global program prints each
// call once). The result is an i32[] zero that nothing needs to read: the op is kept for its effect
// (op.h has_side_effects: dead-code elimination keeps it, common-subexpression elimination never merges
// two, constant folding never evaluates one).
// Errors: InvalidArgument "[debug_print] ..." naming the placeholder count or the stray brace's position.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/core/buffer.h"
#include "mcx/ir/attrs.h"

namespace mcx::ir {

Attrs debug_print_attrs(std::string_view format, int64_t partition);
absl::StatusOr<std::string> get_debug_format(const Attrs& attrs);
// The literal text around the placeholders: num_args + 1 pieces, braces unescaped.
absl::StatusOr<std::vector<std::string>> split_debug_format(std::string_view format, size_t num_args);
// The line the op prints on partition `partition_id` for its operands' values, or nullopt when it prints
// nothing there (it names another partition). Every platform's kernel formats through this.
absl::StatusOr<std::optional<std::string>> debug_print_line(const Attrs& attrs, std::span<const Buffer> operands,
                                                             int partition_id);
// The shape rule: the attributes are checked against the operands; the result is i32[].
absl::StatusOr<AbstractValue> debug_print_infer_type(std::span<const AbstractValue> operands, const Attrs& attrs);

}  // namespace mcx::ir
