// Mutual TLS for the coordination service's gRPC edge.
//
// Enabled when a certificate, key and CA are given (options or MCX_MTLS_CERT_FILE, MCX_MTLS_KEY_FILE,
// MCX_MTLS_CA_FILE). Both sides present a certificate signed by the CA and verify the other's chain;
// the server requires a client certificate. Certificates are read through gRPC's
// FileWatcherCertificateProvider, so a rotated file (rewritten in place or renamed over) is picked up
// without a restart, within refresh_interval.
//
// peer_uri_prefix (MCX_MTLS_PEER_URI_PREFIX): when set (it must end in "/", so "spiffe://ex.org/" cannot
// match "spiffe://ex.org.evil/..."), each side also requires the other's certificate to carry a URI SAN
// starting with it; the client then skips the hostname check.
// bind_task_identity (MCX_MTLS_BIND_TASK_IDENTITY=1): the server requires that a task's certificate has a
// URI SAN ending in "task/<id>" for the task id it acts as (register, heartbeat, barriers, ...), so one
// task's certificate cannot act as another. Observers (mcx-ctl) need no task SAN.
// MCX_REQUIRE_MTLS=1 (require = true): refuse to start the service or a client without mTLS.
#pragma once

#include <optional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct x509_st;  // OpenSSL's X509

namespace mcx::distributed {

struct MtlsOptions {
  std::string cert_file;  // PEM certificate chain of this side
  std::string key_file;   // PEM private key matching cert_file
  std::string ca_file;    // PEM CA bundle used to verify the peer
  std::string peer_uri_prefix;
  bool bind_task_identity = false;
  bool require = false;   // refuse to run without mTLS
  absl::Duration refresh_interval = absl::Seconds(1);  // how often the files are re-read

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// Fills every unset field from the environment map (MCX_MTLS_CERT_FILE, MCX_MTLS_KEY_FILE,
// MCX_MTLS_CA_FILE, MCX_MTLS_PEER_URI_PREFIX, MCX_MTLS_BIND_TASK_IDENTITY, MCX_REQUIRE_MTLS). Explicit
// options win. Pure; tests pass their own map.
MtlsOptions mtls_options_from_env(MtlsOptions explicit_options, const std::map<std::string, std::string>& env);

// Checks the options before any connection: all three files given (or none), each readable and PEM,
// the key matching the certificate, the certificate chaining to the CA, the prefix ending in "/", and
// require => enabled. Errors are InvalidArgument / FailedPrecondition naming the file and the problem,
// e.g. "[mtls] cannot read key file 'k.pem': No such file or directory".
absl::Status validate_mtls_options(const MtlsOptions& options);

// The URI SANs of a PEM certificate (tests and diagnostics), or of a parsed one (OpenSSL's X509).
absl::StatusOr<std::vector<std::string>> certificate_uri_sans(const std::string& pem);
std::vector<std::string> certificate_uri_sans(const x509_st* cert);

// The task id named by a URI SAN ending in "task/<id>", if any (e.g. "spiffe://ex.org/job/task/3" -> 3).
std::optional<int> task_id_from_uri(const std::string& uri);

}  // namespace mcx::distributed
