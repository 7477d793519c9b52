#include "mcx/distributed/job_secret.h"

#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace mcx::distributed {

std::string new_job_secret() {
  std::array<uint8_t, 32> bytes{};
  // OpenSSL's CSPRNG does not fail once seeded; should it, no job may run with a predictable secret.
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) std::abort();
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace mcx::distributed
