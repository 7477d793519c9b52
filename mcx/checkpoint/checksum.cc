#include "mcx/checkpoint/checksum.h"

// The whole implementation from the header (static inline functions): nothing to link, and the hash loop inlined.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "mcx/core/hash.h"

namespace mcx::checkpoint {

std::string_view checksum_name(Checksum c) { return c == Checksum::kSha256 ? "sha256" : "xxh3-128"; }

absl::StatusOr<Checksum> parse_checksum(std::string_view name) {
  if (name == "xxh3-128") return Checksum::kXxh3_128;
  if (name == "sha256") return Checksum::kSha256;
  return absl::InvalidArgumentError(
      absl::StrCat("[checkpoint] unknown checksum '", std::string(name), "'; expected 'xxh3-128' or 'sha256'"));
}

std::string Digest::hex() const { return to_hex(view()); }

struct ChunkHasher::State {
  Checksum checksum;
  std::optional<Sha256> sha;
  XXH3_state_t* xxh = nullptr;
  ~State() {
    if (xxh != nullptr) XXH3_freeState(xxh);
  }
};

ChunkHasher::ChunkHasher(Checksum c) : state_(std::make_unique<State>()) {
  state_->checksum = c;
  if (c == Checksum::kSha256) {
    state_->sha.emplace();
  } else {
    state_->xxh = XXH3_createState();
    if (state_->xxh == nullptr) std::abort();  // out of memory for a few hundred bytes
    XXH3_128bits_reset(state_->xxh);
  }
}

ChunkHasher::~ChunkHasher() = default;

void ChunkHasher::update(std::span<const uint8_t> bytes) {
  if (state_->sha) {
    state_->sha->update(bytes);
  } else {
    XXH3_128bits_update(state_->xxh, bytes.data(), bytes.size());
  }
}

Digest ChunkHasher::digest() {
  Digest d;
  if (state_->sha) {
    const Sha256Digest s = state_->sha->digest();
    std::memcpy(d.bytes.data(), s.data(), s.size());
    d.size = 32;
    return d;
  }
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state_->xxh));
  std::memcpy(d.bytes.data(), canonical.digest, sizeof canonical.digest);
  d.size = sizeof canonical.digest;
  XXH3_128bits_reset(state_->xxh);
  return d;
}

std::string file_digest(Checksum c, std::span<const Digest> chunks) {
  ChunkHasher h(c);
  for (const Digest& d : chunks) h.update(d.view());
  return h.digest().hex();
}

}  // namespace mcx::checkpoint
