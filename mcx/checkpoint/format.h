// The on-disk format of a checkpoint (docs/checkpoint.md, "Format"): the manifest, the commit marker and
// the per-process fragments, as C++ values with their JSON encoding.
//
//   <root>/<step>/manifest.json   tree structure, per leaf: path, dtype, global shape, shards (index box,
//                                 file, byte size, SHA-256 of each kChunkBytes chunk and of that list), user
//                                 metadata, format version
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
#include "mcx/core/dtype.h"
#include "mcx/core/hash.h"
#include "mcx/spmd/partition_spec.h"
#include "mcx/trace/pytree.h"

namespace mcx::checkpoint {

// Version 2: a file's digest is chunk_list_sha256 (version 1 stored the SHA-256 of the whole file, a second
// hash pass over every byte; readers of this version refuse version 1).
inline constexpr int kFormatVersion = 2;
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
  std::string chunk_list_sha256;          // chunk_list_sha256(chunk digests): the file's digest, lower-case hex
  std::vector<std::string> chunk_sha256;  // of bytes [k*kChunkBytes, (k+1)*kChunkBytes), lower-case hex
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
  std::string metadata_json = "{}";  // a JSON object
  TreeDef tree;
  std::vector<LeafRecord> leaves;   // in tree_flatten order
};

// What one process wrote: the hashes and sizes of its files, keyed by (leaf, shard index).
struct FragmentEntry {
  int leaf = 0;
  int shard = 0;
  int64_t bytes = 0;
  std::string chunk_list_sha256;
  std::vector<std::string> chunk_sha256;
};

// A file's digest: the SHA-256 of the concatenation of its chunks' 32-byte SHA-256 digests, in order, as
// lower-case hex (in Python: sha256(b"".join(sha256(chunk).digest() for chunk in chunks)).hexdigest()). Any
// change to the file's bytes changes it as a whole-file SHA-256 would, but it costs no second pass.
std::string chunk_list_sha256(std::span<const Sha256Digest> chunks);

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
