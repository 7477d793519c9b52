// The data plane's connection handshake (tcp_peer_group.h): a process proves it belongs to the job before any
// tensor crosses the connection, and both ends agree which group and ranks the connection serves.
//
// Secret: the coordination service makes a random job secret when it starts (job_secret.h); each process
// reads it over the control plane (with mTLS and task identity binding, only tasks may read it: principal.h).
// So the secret changes with each coordinator incarnation, and the proofs below bind it to one group: its key,
// live set and generation are in the group name, so a proof for one generation is worthless for the next.
//
// Exchange, after the TLS handshake when TLS is on (every integer little-endian):
//   connector -> acceptor  "MCXDP\1\0\0", u32 n, hello (n <= kMaxHelloBytes bytes: from_process, from_rank,
//                          to_process, to_rank as u32, a 32-byte nonce, then the group name)
//   acceptor  -> connector a 32-byte nonce, proof("acceptor")
//   connector -> acceptor  proof("connector")
//   acceptor  -> connector one byte: 1 accepted, 0 refused
// proof(role) = HMAC-SHA256(secret, "mcx data plane <role> v1" | u32 n | hello | acceptor nonce). Each side checks
// the other's proof (constant-time) before it trusts the connection; a stranger without the secret learns
// nothing it could replay (fresh nonces on both sides).
//
// Errors: PermissionDenied naming the check that failed ("does not know the job's secret", "is for process 2,
// this is process 1"); InvalidArgument for a malformed hello; DeadlineExceeded / Unavailable from the stream.
// Thread-safety: pure functions and per-connection procedures.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/data_plane/tcp/stream.h"
#include "mcx/distributed/security/job_secret.h"

namespace mcx::distributed {

inline constexpr uint32_t kMaxHelloBytes = 4096;

struct DataPlaneHello {
  uint32_t from_process = 0;
  uint32_t from_rank = 0;
  uint32_t to_process = 0;
  uint32_t to_rank = 0;
  std::array<uint8_t, 32> nonce{};
  std::string group;  // the group's rendezvous name: key, live set and generation
};

std::string encode_hello(const DataPlaneHello& hello);  // the body, without magic and length
absl::StatusOr<DataPlaneHello> decode_hello(std::string_view body);

// HMAC-SHA256(secret, "mcx data plane <role> v1" | u32 n | body | acceptor_nonce).
std::array<uint8_t, 32> handshake_proof(std::string_view secret, std::string_view role, std::string_view body,
                                        const std::array<uint8_t, 32>& acceptor_nonce);


using SecretSource = std::function<absl::StatusOr<std::string>(absl::Time deadline)>;

// The connector's side: sends `hello`, checks the acceptor's proof, sends its own and reads the verdict.
absl::Status connector_handshake(DataPlaneStream& stream, const DataPlaneHello& hello, std::string_view secret,
                                 absl::Time deadline);

// The acceptor's side: reads a hello meant for `self_process`, runs `check_claim` on it (e.g. that the TLS
// certificate names the process the hello claims; may be null), fetches the secret, proves itself, checks the
// connector's proof and answers. Returns the hello of an accepted connection. A hello refused before the proofs
// (malformed, for another process, a failed claim) is answered by closing the connection.
using ClaimCheck = std::function<absl::Status(const DataPlaneHello&)>;
absl::StatusOr<DataPlaneHello> acceptor_handshake(DataPlaneStream& stream, int self_process,
                                                  const ClaimCheck& check_claim, const SecretSource& secret,
                                                  absl::Time deadline);

}  // namespace mcx::distributed
