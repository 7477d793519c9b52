// JSON text for the few places that write it by hand (the profiler's traces, the coordinator's audit log).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace mcx {

// `s` as a JSON string literal, quotes included: quote, backslash and control characters escaped (\n, \r, \t,
// else \u00XX); other bytes as they are (UTF-8 passes through).
std::string json_string(std::string_view s);

}  // namespace mcx
