// The job's secrets in the coordination service's key-value store.
//
// The service writes them when it starts (a new random value per coordinator incarnation) under kSecretKeys;
// nobody may write or delete them over RPC, and with task identity binding only tasks may read them
// (principal.h: authorize_key, authorize_read). Today there is one: the data plane's connection secret
// (data_plane_handshake.h). Without mTLS the control plane is plaintext and anyone who reaches the coordinator
// can read it: it then keeps out strangers that cannot reach the coordinator, and stale processes of another job.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mcx::distributed {

inline constexpr std::string_view kSecretKeys = "mcx/secret/";
inline constexpr std::string_view kDataPlaneSecretKey = "mcx/secret/data_plane";

inline bool is_secret_key(std::string_view key) { return key.starts_with(kSecretKeys); }

// 32 bytes from OpenSSL's CSPRNG (aborts should it ever fail: nothing may run on predictable bytes).
std::array<uint8_t, 32> random_32_bytes();

// random_32_bytes() as 64 hex digits.
std::string new_job_secret();

}  // namespace mcx::distributed
