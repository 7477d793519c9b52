#include "mcx/core/json_text.h"

#include "absl/strings/str_format.h"

namespace mcx {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned>(c));
        else out += c;
    }
  }
  out += "\"";
  return out;
}

}  // namespace mcx
