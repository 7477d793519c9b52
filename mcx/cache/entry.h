// The bytes of one persistent compilation-cache entry (a file "<key hex>.mcxc"): a checksummed header, then
// the payload compressed with zstd.
//
// Layout (integers little-endian):
//   magic "MCXCACHE" | u32 format version (1) | u32 header size (bytes, up to and including the header digest)
//   | key: 32 bytes | u64 compile time (µs) | i64 creation time (Unix ms) | u64 payload size (uncompressed)
//   | u64 stored size (compressed) | stored bytes' SHA-256: 32 bytes
//   | u32 component count | per component: u16 name length, name, 32-byte digest
//   | SHA-256 of every header byte before it: 32 bytes
//   | stored bytes (one zstd frame)
// Both checksums are verified before anything is decompressed, so a truncated, bit-flipped or foreign file is
// a clear error, never a crash or a wrong payload. The format makes no promise across mcx versions: the key
// includes the version, so another version's entries are misses (docs/compatibility.md).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/cache/cache_key.h"

namespace mcx::cache {

inline constexpr uint32_t kEntryFormatVersion = 1;

struct EntryHeader {
  uint32_t format_version = kEntryFormatVersion;
  Sha256Digest key{};
  absl::Duration compile_time;
  int64_t created_unix_ms = 0;
  uint64_t payload_size = 0;
  uint64_t stored_size = 0;
  Sha256Digest stored_sha256{};
  std::vector<CacheKeyComponent> components;
  uint64_t header_size = 0;  // bytes before the stored payload
};

// The entry for `payload` under `key` (zstd level 3). Internal on a compression failure.
absl::StatusOr<std::string> encode_entry(const CacheKey& key, std::string_view payload, absl::Duration compile_time,
                                         int64_t created_unix_ms);

// Parses and verifies the header only (magic, version, sizes, header checksum; that the file holds exactly
// header + stored bytes when `file_size` is given). DataLoss "[cache] <what>: ..." naming the problem.
absl::StatusOr<EntryHeader> decode_entry_header(std::string_view bytes, const std::string& what,
                                                std::optional<uint64_t> file_size = std::nullopt);

// Verifies the whole entry (header, that its key is `expected_key`, the stored bytes' checksum, the
// decompressed size) and returns the payload; `header`, when given, receives the parsed header. DataLoss
// naming the problem.
absl::StatusOr<std::string> decode_entry(std::string_view bytes, const Sha256Digest& expected_key,
                                         const std::string& what, EntryHeader* header = nullptr);

}  // namespace mcx::cache
