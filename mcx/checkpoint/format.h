// The on-disk format of a checkpoint (docs/checkpoint.md, "Format"): the manifest, the commit marker and
// the per-process fragments, as C++ values with their JSON encoding.
//
//   <root>/<step>/manifest.json   tree structure, per leaf: path, dtype, global shape, shards (index box,
//                                 file, byte size, the digest of each kChunkBytes chunk and of that list), the
//                                 checksum function (checksum.h), user metadata, format version
//   <root>/<step>/COMMIT          written last: the SHA-256 of manifest.json; a step without it is partial
//   <root>/<step>/leaf<i>.shard<j>.npy   one .npy per distinct index box of leaf i
//
// Parsing validates every field it uses and returns DataLoss "[checkpoint] <file>: ..." naming the field
// and what was expected, so an edited or damaged manifest is an error, never a crash.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "mcx/checkpoint/checksum.h"
#include "mcx/core/dtype.h"
#include "mcx/core/hash.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/pytree.h"

namespace mcx::checkpoint {

// Version 3: the manifest names its checksum ("checksum": "xxh3-128" or "sha256"; checksum.h) and each shard
// lists "digest" and "chunk_digests" in it. Version 2 (read, never written) was SHA-256 only, the same digests
// under "chunk_list_sha256" and "chunk_sha256". Version 1 (refused) stored the SHA-256 of the whole file.
inline constexpr int kFormatVersion = 3;
inline constexpr int kOldestReadableVersion = 2;
inline constexpr char kFormatName[] = "mcx.checkpoint";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kCommitFile[] = "COMMIT";
// Files are hashed in chunks of this many bytes (from offset 0, header included), so a reader that needs
// part of a file verifies only the chunks it reads.
inline constexpr int64_t kChunkBytes = int64_t{1} << 20;

// One written file: a distinct index box of one leaf.
struct ShardRecord {
  IndexBox box;             // global indices [start, stop) per dimension
  std::string file;         // relative to the step directory
  int64_t bytes = 0;        // file size
  std::string digest;                      // file_digest(chunk digests) (checksum.h), lower-case hex
  std::vector<std::string> chunk_digests;  // of bytes [k*kChunkBytes, (k+1)*kChunkBytes), lower-case hex
  int process = 0;          // the process that wrote it
  int device = 0;           // the global id of the device it was copied from
};

struct LeafRecord {
  std::string path;         // "params/w", "layers/0/b"; "" for a tree that is one leaf
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<ShardRecord> shards;  // together they cover the global box exactly once
};

struct Manifest {
  int version = kFormatVersion;
  int64_t step = 0;
  int process_count = 1;
  Checksum checksum = Checksum::kXxh3_128;  // of every shard's digests
  std::string metadata_json = "{}";  // a JSON object
  TreeDef tree;
  std::vector<LeafRecord> leaves;   // in tree_flatten order
};

// What one process wrote: the hashes and sizes of its files, keyed by (leaf, shard index).
struct FragmentEntry {
  int leaf = 0;
  int shard = 0;
  int64_t bytes = 0;
  std::string digest;
  std::vector<std::string> chunk_digests;
};

std::string manifest_to_json(const Manifest& m);
// `where` names the file in errors.
absl::StatusOr<Manifest> manifest_from_json(std::string_view text, const std::string& where);

std::string fragment_to_json(int process, const std::vector<FragmentEntry>& entries);
absl::StatusOr<std::vector<FragmentEntry>> fragment_from_json(std::string_view text, const std::string& where);

// The commit marker: names the format and carries the manifest's SHA-256.
std::string commit_to_json(int64_t step, const std::string& manifest_sha256);
absl::StatusOr<std::string> manifest_sha_from_commit(std::string_view text, const std::string& where);

// InvalidArgument "[checkpoint] metadata is not a JSON object: ..." unless text is one.
absl::Status validate_metadata(std::string_view text);

// Leaf paths in flatten order: dict keys and list/tuple indices joined by '/'.
std::vector<std::string> leaf_paths(const TreeDef& def);

std::string shard_file_name(int leaf, int shard);
std::string step_dir_name(int64_t step);
std::string fragment_file_name(int process);

}  // namespace mcx::checkpoint
