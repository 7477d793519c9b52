// A checker of Chrome trace-event JSON (the "JSON Object Format" that Perfetto's trace processor and
// chrome://tracing import), for `mcx-profile check` and the profiler's tests: it parses the text and checks each
// event's fields against the format's rules, so a file that passes opens in those viewers.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mcx::tools {

// The parsed trace, or InvalidArgument naming the first event (by index) and field that breaks the format:
// a top-level object with a "traceEvents" array; every event an object with "ph" one of the phases the
// profiler writes (X, i, C, M), a string "name", integer "pid" and "tid"; "ts" a number >= 0 except on
// metadata; X with a number "dur" >= 0; i with "s" one of g, p, t; C with an object "args" of numbers; M named
// process_name or thread_name with a string args.name; "args", where present, an object; "cat" a string.
absl::StatusOr<nlohmann::json> parse_trace_events(std::string_view text);

}  // namespace mcx::tools
