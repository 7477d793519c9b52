// The checksums of a checkpoint's files (format.h): every kChunkBytes chunk of a file has a digest, and the
// file's digest is the same function over the concatenation of its chunks' digests (no second pass over the
// bytes). Two functions:
//   xxh3-128  XXH3's 128-bit hash (Debian's libxxhash), the default: it guards against accidental corruption
//             (a torn write, a flipped bit, a truncated or swapped file) at memory speed (tens of GB/s a core);
//             it is not a defence against someone who edits the files on purpose.
//   sha256    SHA-256 (OpenSSL), on request (CheckpointOptions::checksum): also tamper-evident (nobody can make
//             a file with the digests the manifest lists), at about 2 GB/s a core.
// Digests are written as lower-case hex: XXH3-128 in its canonical (big-endian) byte order, as xxhash's
// xxh3_128().hexdigest() prints it.
// Thread-safety: pure functions; one ChunkHasher per thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx::checkpoint {

enum class Checksum { kXxh3_128, kSha256 };

std::string_view checksum_name(Checksum c);  // "xxh3-128", "sha256"
// InvalidArgument naming the accepted names when `name` is none of them.
absl::StatusOr<Checksum> parse_checksum(std::string_view name);

// A raw digest (16 bytes for XXH3-128, 32 for SHA-256).
struct Digest {
  std::array<uint8_t, 32> bytes{};
  uint8_t size = 0;
  std::span<const uint8_t> view() const { return {bytes.data(), size}; }
  std::string hex() const;
};

// Digest of a byte stream given in pieces.
class ChunkHasher {
 public:
  explicit ChunkHasher(Checksum c);
  ~ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;
  void update(std::span<const uint8_t> bytes);
  // The digest of everything given since construction (or the previous digest()); starts over.
  Digest digest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The file's digest from its chunks' digests, as hex.
std::string file_digest(Checksum c, std::span<const Digest> chunks);

}  // namespace mcx::checkpoint
