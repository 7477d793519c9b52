// The bytes of a data file: memory-mapped (read-only, shared) or, for gzip files, decompressed into memory.
// The readers of the file formats (idx_source.h, npy_source.h, csv_source.h) parse these bytes.
//
// Errors: NotFound / PermissionDenied / Internal "[data] cannot open '<path>': <reason>"; for gzip data,
// DataLoss "[data] <path>: truncated gzip stream: expected more compressed data after byte N" or
// "[data] <path>: corrupt gzip stream: <zlib's message>".
// Thread-safety: the returned bytes are immutable and may be read from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace mcx::data {

struct FileBytes {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> keep;  // owns the mapping or the decompressed copy
};

// The file's bytes, memory-mapped (an empty file gives an empty span).
absl::StatusOr<FileBytes> map_file(const std::string& path);
// The file's contents, decompressed when the file starts with the gzip magic (1f 8b), else mapped.
absl::StatusOr<FileBytes> read_maybe_gzip(const std::string& path);

}  // namespace mcx::data
