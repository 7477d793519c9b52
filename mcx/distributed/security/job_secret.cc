#include "mcx/distributed/security/job_secret.h"

#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace mcx::distributed {

std::array<uint8_t, 32> random_32_bytes() {
  std::array<uint8_t, 32> bytes{};
  // OpenSSL's CSPRNG does not fail once seeded; should it, nothing may run on predictable bytes.
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) std::abort();
  return bytes;
}

std::string new_job_secret() {
  const std::array<uint8_t, 32> bytes = random_32_bytes();
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace mcx::distributed
