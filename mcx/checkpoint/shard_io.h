// Writing one shard file and reading the part of a stored shard that a target box needs.
//
// write_shard: a .npy file (npy_header + the buffer's bytes), hashed whole and per kChunkBytes chunk while it
// is written, then fsynced. read_region: reads only the rows of the stored file that the region covers
// (rounded out to whole chunks, plus chunk 0 for the header), checks the file size against the manifest,
// each chunk read against its SHA-256 and the .npy header against the manifest's dtype and shape, then
// copies the region into dst. Errors are DataLoss (NotFound for a missing file) starting
// "[checkpoint] leaf '<path>': file '<file>' ..." and saying what was expected and what was found.
//
// Blocking: file I/O. Thread-safety: no shared state; concurrent calls on distinct dst regions are safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/format.h"
#include "mcx/core/buffer.h"

namespace mcx::checkpoint {

// Creates path (which must not exist) holding buffer as a .npy file. The entry's leaf and shard are left 0.
absl::StatusOr<FragmentEntry> write_shard(const std::string& path, const Buffer& buffer);

// Copies the elements of `region` (global indices, inside stored.box and dst_box) from the stored shard of
// `leaf` in step directory dir into dst, which holds dst_box.
absl::Status read_region(const std::string& dir, const LeafRecord& leaf, const ShardRecord& stored,
                         const IndexBox& region, Buffer& dst, const IndexBox& dst_box);

}  // namespace mcx::checkpoint
