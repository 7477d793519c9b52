// Private to the coordination service's .cc files: how its messages print durations, task lists and keys.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "mcx/distributed/coordination/types.h"

namespace mcx::distributed {

inline std::string fmt_duration(absl::Duration d) {
  // Round to ms so messages stay readable ("1.234s").
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

inline absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline std::string join_ids(const std::vector<TaskId>& ids) { return absl::StrJoin(ids, ", "); }

inline std::string strip_trailing_slashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace mcx::distributed
