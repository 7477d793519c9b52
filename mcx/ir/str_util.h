// Internal string helpers of the IR layer. absl::StrCat in Debian's abseil does not take std::string_view,
// so messages are assembled through ostream insertion instead.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace mcx::ir::internal {

template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

// Joins the elements of a range with sep, each inserted with operator<<.
template <typename Range>
std::string join(const Range& r, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& x : r) {
    if (!first) os << sep;
    os << x;
    first = false;
  }
  return os.str();
}

// InvalidArgument "[op] <a...>": the error of an op's shape rule or attribute check.
template <typename... A>
absl::Status op_error(std::string_view op, const A&... a) {
  return absl::InvalidArgumentError(cat("[", op, "] ", a...));
}

// s (same code) with an Attrs getter's "[attrs] " prefix replaced by "[op] ".
inline absl::Status with_op_prefix(std::string_view op, const absl::Status& s) {
  std::string m(s.message());  // Debian's absl::string_view is not std::string_view
  if (m.rfind("[attrs] ", 0) == 0) m.erase(0, 8);
  return absl::Status(s.code(), cat("[", op, "] ", m));
}

}  // namespace mcx::ir::internal
