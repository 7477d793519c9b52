#include "mcx/core/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace mcx {
namespace {
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "[sha256] OpenSSL %s failed\n", what);
  std::abort();
}
}  // namespace

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  Ctx() {
    md = EVP_MD_CTX_new();
    if (md == nullptr) die("EVP_MD_CTX_new");
    reset();
  }
  ~Ctx() { EVP_MD_CTX_free(md); }
  void reset() {
    if (EVP_DigestInit_ex(md, EVP_sha256(), nullptr) != 1) die("EVP_DigestInit_ex");
  }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

Sha256& Sha256::update(std::span<const uint8_t> data) {
  if (!data.empty() && EVP_DigestUpdate(ctx_->md, data.data(), data.size()) != 1) die("EVP_DigestUpdate");
  return *this;
}

Sha256& Sha256::update(std::string_view data) {
  return update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
}

Sha256& Sha256::update_u64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return update(std::span<const uint8_t>(b, 8));
}

Sha256Digest Sha256::digest() {
  Sha256Digest out;
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out.data(), &len) != 1 || len != out.size()) die("EVP_DigestFinal_ex");
  ctx_->reset();
  return out;
}

Sha256Digest sha256(std::span<const uint8_t> data) { return Sha256().update(data).digest(); }
Sha256Digest sha256(std::string_view data) { return Sha256().update(data).digest(); }

uint64_t fnv1a64(std::string_view data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string to_hex(std::span<const uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace mcx
