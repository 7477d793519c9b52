#include "mcx/cache/entry.h"

#include <zstd.h>

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"

namespace mcx::cache {
namespace {

constexpr char kMagic[8] = {'M', 'C', 'X', 'C', 'A', 'C', 'H', 'E'};
// magic, version, header size, key, compile time, created, payload size, stored size, stored sha, count.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 32;
constexpr size_t kFixedBytes = 8 + 4 + 4 + 32 + 8 + 8 + 8 + 8 + 32 + 4;

void put_u16(std::string& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_digest(std::string& out, const Sha256Digest& d) { out.append(reinterpret_cast<const char*>(d.data()), d.size()); }

// Reads little-endian fields from a bounded span; every read checks the bound.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool u16(uint16_t* v) { return uint_le(2, v); }
  bool u32(uint32_t* v) { return uint_le(4, v); }
  bool u64(uint64_t* v) { return uint_le(8, v); }
  bool digest(Sha256Digest* d) {
    if (bytes_.size() - pos_ < d->size()) return false;
    std::memcpy(d->data(), bytes_.data() + pos_, d->size());
    pos_ += d->size();
    return true;
  }
  bool text(size_t n, std::string* s) {
    if (bytes_.size() - pos_ < n) return false;
    s->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  template <typename T>
  bool uint_le(size_t n, T* v) {
    if (bytes_.size() - pos_ < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    *v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> encode_entry(const CacheKey& key, std::string_view payload, absl::Duration compile_time,
                                         int64_t created_unix_ms) {
  std::string stored(ZSTD_compressBound(payload.size()), '\0');
  const size_t n = ZSTD_compress(stored.data(), stored.size(), payload.data(), payload.size(), 3);
  if (ZSTD_isError(n)) return absl::InternalError(absl::StrCat("[cache] zstd compression failed: ", ZSTD_getErrorName(n)));
  stored.resize(n);

  std::string out;
  out.append(kMagic, sizeof kMagic);
  put_u32(out, kEntryFormatVersion);
  const size_t header_size_at = out.size();
  put_u32(out, 0);  // patched below
  put_digest(out, key.digest());
  put_u64(out, static_cast<uint64_t>(std::max<int64_t>(absl::ToInt64Microseconds(compile_time), 0)));
  put_u64(out, static_cast<uint64_t>(created_unix_ms));
  put_u64(out, payload.size());
  put_u64(out, stored.size());
  put_digest(out, sha256(stored));
  put_u32(out, static_cast<uint32_t>(key.components().size()));
  for (const CacheKeyComponent& c : key.components()) {
    put_u16(out, static_cast<uint16_t>(c.name.size()));
    out.append(c.name);
    put_digest(out, c.digest);
  }
  const uint32_t header_size = static_cast<uint32_t>(out.size() + 32);
  for (int i = 0; i < 4; ++i) out[header_size_at + i] = static_cast<char>((header_size >> (8 * i)) & 0xff);
  put_digest(out, sha256(std::string_view(out)));
  out.append(stored);
  return out;
}

absl::StatusOr<EntryHeader> decode_entry_header(std::string_view bytes, const std::string& what,
                                                std::optional<uint64_t> file_size) {
  auto bad = [&](const std::string& why) { return absl::DataLossError(absl::StrCat("[cache] ", what, ": ", why)); };
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return bad("not an mcx cache entry (expected the magic 'MCXCACHE')");
  }
  Reader r(bytes.substr(sizeof kMagic));
  EntryHeader h;
  uint32_t header_size = 0;
  if (!r.u32(&h.format_version) || !r.u32(&header_size)) return bad("truncated header");
  if (h.format_version != kEntryFormatVersion) {
    return bad(absl::StrCat("entry format version ", h.format_version, ", expected ", kEntryFormatVersion));
  }
  if (header_size < kFixedBytes + 32 || header_size > bytes.size()) {
    return bad(absl::StrCat("header of ", header_size, " bytes in ", bytes.size(), " bytes (truncated or corrupted)"));
  }
  // The header checksum first: nothing below is trusted before it matches.
  Sha256Digest want{};
  std::memcpy(want.data(), bytes.data() + header_size - 32, 32);
  if (sha256(bytes.substr(0, header_size - 32)) != want) return bad("header checksum mismatch (corrupted)");
  uint64_t compile_us = 0, created = 0;
  uint32_t count = 0;
  if (!r.digest(&h.key) || !r.u64(&compile_us) || !r.u64(&created) || !r.u64(&h.payload_size) ||
      !r.u64(&h.stored_size) || !r.digest(&h.stored_sha256) || !r.u32(&count)) {
    return bad("truncated header");
  }
  h.compile_time = absl::Microseconds(static_cast<int64_t>(compile_us));
  h.created_unix_ms = static_cast<int64_t>(created);
  for (uint32_t i = 0; i < count; ++i) {
    uint16_t len = 0;
    CacheKeyComponent c;
    if (!r.u16(&len) || !r.text(len, &c.name) || !r.digest(&c.digest)) return bad("truncated key components");
    h.components.push_back(std::move(c));
  }
  if (sizeof kMagic + r.pos() + 32 != header_size) return bad("header size disagrees with its fields");
  h.header_size = header_size;
  if (file_size && *file_size != header_size + h.stored_size) {
    return bad(absl::StrCat("file holds ", *file_size, " bytes, expected ", header_size + h.stored_size,
                            " (truncated or extended)"));
  }
  return h;
}

absl::StatusOr<std::string> decode_entry(std::string_view bytes, const Sha256Digest& expected_key,
                                         const std::string& what, EntryHeader* header) {
  auto bad = [&](const std::string& why) { return absl::DataLossError(absl::StrCat("[cache] ", what, ": ", why)); };
  absl::StatusOr<EntryHeader> h = decode_entry_header(bytes, what, bytes.size());
  if (!h.ok()) return h.status();
  if (h->key != expected_key) return bad(absl::StrCat("holds key ", to_hex(h->key), ", expected ", to_hex(expected_key)));
  const std::string_view stored = bytes.substr(h->header_size);
  if (sha256(stored) != h->stored_sha256) return bad("payload checksum mismatch (corrupted)");
  const unsigned long long frame = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (frame != h->payload_size) return bad("payload size disagrees with its compressed frame");
  if (h->payload_size > kMaxPayloadBytes) return bad(absl::StrCat("payload of ", h->payload_size, " bytes exceeds the limit"));
  std::string payload(h->payload_size, '\0');
  const size_t n = ZSTD_decompress(payload.data(), payload.size(), stored.data(), stored.size());
  if (ZSTD_isError(n) || n != h->payload_size) return bad("payload does not decompress");
  if (header != nullptr) *header = *std::move(h);
  return payload;
}

}  // namespace mcx::cache
