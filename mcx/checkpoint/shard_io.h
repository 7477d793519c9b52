// Writing the shard files of a save and reading the part of a stored shard that a target box needs.
//
// write_shards: each file is a .npy (npy_header + the buffer's bytes), cut into slabs of 4 chunks; one task
// handles a slab: the digest (checksum.h) of each kChunkBytes chunk (header included) and one write of the slab while
// its bytes are in cache (no per-chunk syscalls, one pass over memory). Files are opened with O_DIRECT where
// the file system takes it: the slab is copied into a reused aligned buffer, hashed there and written without
// the page-cache copy (the last slab padded, the file cut to size before the fsync); elsewhere the slab is
// hashed from the source and written buffered, its writeback started at once (sync_file_range). Slabs of all
// files are spread over `threads` threads (parallel.h), then every file is fsynced. Without `durable`
// (CheckpointOptions::durable = false) the files are written buffered and never fsynced: they survive the
// process (kill -9) but not a crash of the machine. A file's digest is file_digest (checksum.h), derived from
// the chunk digests without another pass.
//
// read_region: reads only the rows of the stored file that the region covers (rounded out to whole chunks,
// plus chunk 0 for the header), checks the file size against the manifest, each chunk read against its
// digest (the manifest's checksum) and the .npy header against the manifest's dtype and shape. When the region's rows are contiguous
// in both the file and dst (the region spans every dimension but the first of both boxes), the rows are
// read straight into dst (no intermediate copy; only the partial chunks around them go to a side buffer);
// otherwise through one buffer and copy_box. Errors are DataLoss (NotFound for a missing file) starting
// "[checkpoint] leaf '<path>': file '<file>' ..." and saying what was expected and what was found; on an
// error dst's region may hold unverified bytes (callers discard dst).
//
// Blocking: file I/O. Thread-safety: no shared state; concurrent read_region calls on disjoint dst regions
// (of the same or different buffers) are safe.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/format.h"
#include "mcx/core/buffer.h"

namespace mcx::checkpoint {

struct ShardFile {
  std::string path;  // must not exist
  const Buffer* data = nullptr;
};

// Creates every file (O_EXCL) and returns its entry (bytes and hashes; leaf and shard left 0), in order.
// On an error the files already created are left for the caller's cleanup (a save removes its whole
// temporary directory on the next save).
absl::StatusOr<std::vector<FragmentEntry>> write_shards(std::span<const ShardFile> files, int threads,
                                                        bool durable = true,
                                                        Checksum checksum = Checksum::kXxh3_128);
// One file on the calling thread, durably.
absl::StatusOr<FragmentEntry> write_shard(const std::string& path, const Buffer& buffer,
                                          Checksum checksum = Checksum::kXxh3_128);

// Copies the elements of `region` (global indices, inside stored.box and dst_box) from the stored shard of
// `leaf` in step directory dir into dst, which holds dst_box, checking digests of `checksum` (the manifest's).
absl::Status read_region(const std::string& dir, Checksum checksum, const LeafRecord& leaf,
                         const ShardRecord& stored, const IndexBox& region, Buffer& dst, const IndexBox& dst_box);

}  // namespace mcx::checkpoint
