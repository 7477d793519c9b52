#include "mcx/ir/debug_print.h"

#include <cstring>

#include "mcx/core/error.h"
#include "mcx/ir/str_util.h"

namespace mcx::ir {
using internal::op_error;
using internal::with_op_prefix;
namespace {
constexpr std::string_view kName = "debug_print";
}  // namespace

Attrs debug_print_attrs(std::string_view format, int64_t partition) {
  Buffer text = Buffer::uninitialized(DType::kUInt8, {static_cast<int64_t>(format.size())});
  if (!format.empty()) std::memcpy(text.mutable_data(), format.data(), format.size());
  return Attrs{{"format", std::move(text)}, {"partition", partition}};
}

absl::StatusOr<std::string> get_debug_format(const Attrs& attrs) {
  auto text = attrs.get_buffer("format");
  if (!text.ok()) return with_op_prefix(kName, text.status());
  if (text->dtype() != DType::kUInt8 || text->dims().size() != 1)
    return op_error(kName, "attribute 'format' must be u8[n] text, found ", text->abstract_value().to_string());
  return std::string(static_cast<const char*>(text->data()), static_cast<size_t>(text->dims()[0]));
}

absl::StatusOr<std::vector<std::string>> split_debug_format(std::string_view format, size_t num_args) {
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    const bool doubled = i + 1 < format.size() && format[i + 1] == c;
    if (c == '{' && i + 1 < format.size() && format[i + 1] == '}') {
      pieces.emplace_back();
      ++i;
    } else if ((c == '{' || c == '}') && doubled) {
      pieces.back() += c;
      ++i;
    } else if (c == '{' || c == '}') {
      return op_error(kName, "the format has a single '", std::string(1, c), "' at position ", i,
                      "; expected '{}' for a value, or '", std::string(2, c), "' for a literal brace");
    } else {
      pieces.back() += c;
    }
  }
  if (pieces.size() != num_args + 1)
    return op_error(kName, "the format has ", pieces.size() - 1, " placeholders '{}', found ", num_args,
                    num_args == 1 ? " value" : " values");
  return pieces;
}

absl::StatusOr<AbstractValue> debug_print_infer_type(std::span<const AbstractValue> operands, const Attrs& attrs) {
  MCX_ASSIGN_OR_RETURN(std::string format, get_debug_format(attrs));
  MCX_RETURN_IF_ERROR(split_debug_format(format, operands.size()).status());
  auto partition = attrs.get_int("partition");
  if (!partition.ok()) return with_op_prefix(kName, partition.status());
  if (*partition < -1)
    return op_error(kName, "attribute 'partition' is ", *partition, ", expected -1 (every device) or a partition id");
  return AbstractValue{DType::kInt32, {}};
}

absl::StatusOr<std::optional<std::string>> debug_print_line(const Attrs& attrs, std::span<const Buffer> operands,
                                                             int partition_id) {
  MCX_ASSIGN_OR_RETURN(int64_t partition, attrs.get_int("partition"));
  if (partition >= 0 && partition != partition_id) return std::nullopt;
  MCX_ASSIGN_OR_RETURN(std::string format, get_debug_format(attrs));
  MCX_ASSIGN_OR_RETURN(std::vector<std::string> pieces, split_debug_format(format, operands.size()));
  std::string line = pieces[0];
  for (size_t i = 0; i < operands.size(); ++i) {
    line += operands[i].to_nested_string();
    line += pieces[i + 1];
  }
  return line;
}

}  // namespace mcx::ir
