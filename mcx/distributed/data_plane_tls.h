// TLS 1.3 for the data plane's own transport (tcp_peer_group.h), from the control plane's mTLS files (mtls.h).
//
// Both ends present their certificate and require the other's, signed by the job's CA (mutual TLS, as on the
// control plane). After the handshake, check_peer() binds the connection to the process it claims to be:
// with MtlsOptions::peer_uri_prefix set, the peer's certificate must carry a URI SAN under it; with
// bind_task_identity, a URI SAN naming task/<process> (the process the connection is for). Hostnames are not
// checked (peers are named by task identity, not by DNS).
//
// Ciphers: TLS 1.3 only, AES-GCM first (AES-NI makes it the fastest suite on x86), ChaCha20-Poly1305 last.
// Certificates are read once, at create(): a rotated file takes effect for the data plane when the process
// restarts (the control plane re-reads its files; docs/security.md).
//
// Errors: FailedPrecondition "[data plane tls] ..." naming the file and OpenSSL's reason; PermissionDenied from
// check_peer naming the expected process and the certificate's URI SANs.
// Thread-safety: immutable after create(); SSL objects made from it belong to one connection each.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <openssl/ssl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/distributed/mtls.h"

namespace mcx::distributed {

class DataPlaneTls {
 public:
  static absl::StatusOr<std::shared_ptr<DataPlaneTls>> create(const MtlsOptions& options);
  ~DataPlaneTls();
  DataPlaneTls(const DataPlaneTls&) = delete;
  DataPlaneTls& operator=(const DataPlaneTls&) = delete;

  // A new SSL object for a connected socket (not yet handshaken); the caller owns it (SSL_free).
  absl::StatusOr<SSL*> new_ssl(int fd, bool server) const;

  // Checks the peer certificate of a handshaken connection against the options (see above).
  absl::Status check_peer(SSL* ssl, int expected_process) const;

 private:
  DataPlaneTls(SSL_CTX* ctx, MtlsOptions options) : ctx_(ctx), options_(std::move(options)) {}
  SSL_CTX* ctx_;
  MtlsOptions options_;
};

// OpenSSL's error queue as text (and clears it), for messages.
std::string openssl_errors();

}  // namespace mcx::distributed
