// Internal string helpers of the IR layer. absl::StrCat in Debian's abseil does not take std::string_view,
// so messages are assembled through ostream insertion instead.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

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

}  // namespace mcx::ir::internal
