// SHA-256 (OpenSSL EVP) for content hashes: compilation-cache keys, artifact checksums, fingerprints.
// Thread-safety: the free functions are thread-safe; one Sha256 object must not be shared between
// threads without external locking.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace mcx {

using Sha256Digest = std::array<uint8_t, 32>;

// One-shot digest of bytes / of the bytes of a string.
Sha256Digest sha256(std::span<const uint8_t> data);
Sha256Digest sha256(std::string_view data);

// Incremental hashing: update() any number of times, then digest() once. After digest() the object
// is reset and can hash a new message. OpenSSL failures (which do not happen for SHA-256 in practice)
// abort with a message rather than returning a wrong digest.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(std::span<const uint8_t> data);
  Sha256& update(std::string_view data);
  // Convenience for fixed-width integers (little-endian, 8 bytes) so keys need no ad-hoc encoding.
  Sha256& update_u64(uint64_t v);
  Sha256Digest digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Lower-case hexadecimal.
std::string to_hex(std::span<const uint8_t> bytes);

// 64-bit FNV-1a: a cheap, stable tag for names and shapes that every process computes alike (not for integrity;
// use sha256 for that).
uint64_t fnv1a64(std::string_view data);
inline std::string to_hex(const Sha256Digest& d) { return to_hex(std::span<const uint8_t>(d)); }

}  // namespace mcx
