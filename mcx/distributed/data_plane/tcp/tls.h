// TLS 1.3 for the data plane's own transport (tcp_peer_group.h), from the control plane's mTLS files (mtls.h).
//
// Both ends present their certificate and require the other's, signed by the job's CA (mutual TLS, as on the
// control plane). After the handshake, check_peer() binds the connection to the process it claims to be:
// with MtlsOptions::peer_uri_prefix set, the peer's certificate must carry a URI SAN under it; with
// bind_task_identity, a URI SAN naming task/<process> (the process the connection is for). Hostnames are not
// checked (peers are named by task identity, not by DNS).
//
// Ciphers: TLS 1.3 only, AES-GCM first (AES-NI makes it the fastest suite on x86), ChaCha20-Poly1305 last.
// Rotation: new_ssl() checks the three files at most once per MtlsOptions::refresh_interval and, when one changed
// (mtime, size or inode: replace them by rename), loads them again; new connections use the new certificate,
// existing ones keep their session. A set that does not load (a key that does not match its certificate
// yet) is logged and the previous one kept until the files change again.
//
// Errors: FailedPrecondition "[data plane tls] ..." naming the file and OpenSSL's reason; PermissionDenied from
// check_peer naming the expected process and the certificate's URI SANs.
// Thread-safety: thread-safe; SSL objects made from it belong to one connection each.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <openssl/ssl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

class DataPlaneTls {
 public:
  static absl::StatusOr<std::shared_ptr<DataPlaneTls>> create(const MtlsOptions& options);
  ~DataPlaneTls();
  DataPlaneTls(const DataPlaneTls&) = delete;
  DataPlaneTls& operator=(const DataPlaneTls&) = delete;

  // A new SSL object for a connected socket (not yet handshaken), from the newest certificate files; the caller
  // owns it (SSL_free).
  absl::StatusOr<SSL*> new_ssl(int fd, bool server) const;

  // Checks the peer certificate of a handshaken connection against the options (see above).
  absl::Status check_peer(SSL* ssl, int expected_process) const;

 private:
  DataPlaneTls(SSL_CTX* ctx, MtlsOptions options, std::string files)
      : options_(std::move(options)), ctx_(ctx), files_(std::move(files)) {}
  static absl::StatusOr<SSL_CTX*> load(const MtlsOptions& options);
  static std::string file_signature(const MtlsOptions& options);  // mtime, size and inode of the three files
  void reload_if_changed() const;                                 // mu_ held

  const MtlsOptions options_;
  mutable std::mutex mu_;
  mutable SSL_CTX* ctx_;            // guarded by mu_
  mutable std::string files_;       // guarded by mu_: the signature ctx_ was loaded from (or last tried)
  mutable absl::Time checked_;      // guarded by mu_
};

// OpenSSL's error queue as text (and clears it), for messages.
std::string openssl_errors();

}  // namespace mcx::distributed
