// Whole text files read and written in one call: the profiler's traces, their merge and the job's report.
// write_text_file replaces `path` through a temporary file beside it (path + ".tmp") renamed into place, so a
// reader never sees half a file.
// Errors: NotFound naming a file that cannot be read; Internal naming the file and the OS's reason when one
// cannot be written or renamed (the temporary is removed).
// Thread-safety: pure functions over their files.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx {

absl::StatusOr<std::string> read_text_file(const std::string& path);
absl::Status write_text_file(const std::string& path, std::string_view text);

}  // namespace mcx
