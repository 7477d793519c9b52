// .npy sources: one file (memory-mapped, read in place; the first dimension numbers the examples), or a
// directory of .npy shards read as their concatenation along the first dimension, in file-name order (every
// shard memory-mapped; all shards must agree in dtype and trailing dims). A compressed file (gzip, e.g.
// x.npy.gz) is decompressed into memory at open.
//
// Errors (naming the file): those of parse_npy_layout (core/npy.h: bad magic, header, truncated data ...);
// InvalidArgument for a 0-d array, and in a directory for a shard whose dtype or trailing dims differ from
// the first shard's ("[data] dir/b.npy: expected u8[28,28] examples like dir/a.npy, found f32[28,28]") and for
// a directory without .npy files.
// Thread-safety: immutable after opening.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/data/source.h"

namespace mcx::data {

absl::StatusOr<SourcePtr> load_npy(const std::string& path);
SourcePtr open_npy(const std::string& path);

absl::StatusOr<SourcePtr> load_npy_dir(const std::string& dir);
SourcePtr open_npy_dir(const std::string& dir);

}  // namespace mcx::data
