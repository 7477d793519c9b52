// Durable file-system steps of a checkpoint save (POSIX): small files written and fsynced, directories
// fsynced, reads with pread, and the listing of a checkpoint root.
//
// Errors: NotFound / PermissionDenied / Internal "[checkpoint] cannot <what> '<path>': <strerror>".
// Blocking: file I/O only. Thread-safety: no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mcx::checkpoint {

// The status for a failed system call on path (reads errno).
absl::Status io_error(const std::string& what, const std::string& path);

// Creates path (failing if it exists) and writes bytes; fsyncs it when `sync` (CheckpointOptions::durable).
absl::Status write_new_file(const std::string& path, std::string_view bytes, bool sync);
absl::StatusOr<std::string> read_file(const std::string& path);
absl::Status fsync_dir(const std::string& path);
// Reads exactly out.size() bytes at offset; DataLoss naming the file when it ends first.
absl::Status pread_exact(int fd, const std::string& path, int64_t offset, std::span<uint8_t> out);

// Committed steps under root (directories named by a decimal step that hold a commit marker), ascending.
// A missing root has none.
absl::StatusOr<std::vector<int64_t>> committed_steps(const std::string& root);
// Directories under root left by saves that never committed: "<step>.tmp-*" and step directories without a
// commit marker (a retention delete interrupted after removing the marker).
absl::StatusOr<std::vector<std::string>> partial_dirs(const std::string& root);
// Removes a directory tree; OK when it does not exist.
absl::Status remove_tree(const std::string& path);

}  // namespace mcx::checkpoint
