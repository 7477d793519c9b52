// The keys the coordination service writes itself in its key-value store: the job's secrets, and (below) what
// it says of itself.
//
// The service writes them when it starts (a new random value per coordinator incarnation) under kSecretKeys;
// nobody may write or delete them over RPC, and with task identity binding only tasks may read them
// (principal.h: authorize_key, authorize_read). Today there is one: the data plane's connection secret
// (tcp/handshake.h). Without mTLS the control plane is plaintext and anyone who reaches the coordinator
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

// What the service says of itself, written when it starts and by nobody else (like the secrets, but readable by
// everyone): kServiceModeKey holds "recoverable" or "fate-sharing" (ServiceOptions::recoverable), so a
// process that asks for a recoverable job learns at initialize() whether its coordinator runs one.
inline constexpr std::string_view kServiceKeys = "mcx/service/";
inline constexpr std::string_view kServiceModeKey = "mcx/service/mode";

inline bool is_service_key(std::string_view key) { return key.starts_with(kServiceKeys); }

// Keys only the service writes (the secrets and its own): no caller writes or deletes them, and the job's key
// count leaves them out.
inline bool written_by_service(std::string_view key) { return is_secret_key(key) || is_service_key(key); }

// 32 bytes from OpenSSL's CSPRNG (aborts should it ever fail: nothing may run on predictable bytes).
std::array<uint8_t, 32> random_32_bytes();

// random_32_bytes() as 64 hex digits.
std::string new_job_secret();

}  // namespace mcx::distributed
