#include "mcx/distributed/rpc/grpc_tls.h"

#include <openssl/crypto.h>

#include <cstdlib>
#include <mutex>

#include <grpc/grpc.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace mcx::distributed {
namespace {

namespace gx = grpc::experimental;

// Accepts a peer only if one of its URI SANs starts with the prefix (which ends in "/").
class UriPrefixVerifier final : public gx::ExternalCertificateVerifier {
 public:
  explicit UriPrefixVerifier(std::string prefix) : prefix_(std::move(prefix)) {}
  bool Verify(gx::TlsCustomVerificationCheckRequest* request, std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    for (const grpc::string_ref& uri : request->uri_names()) {
      std::string u(uri.data(), uri.size());
      if (u.compare(0, prefix_.size(), prefix_) == 0) {
        *sync_status = grpc::Status::OK;
        return true;
      }
    }
    *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                absl::StrCat("[mtls] the peer certificate has no URI SAN starting with '", prefix_, "'"));
    return true;
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  std::string prefix_;
};

std::shared_ptr<gx::FileWatcherCertificateProvider> provider(const MtlsOptions& o) {
  return std::make_shared<gx::FileWatcherCertificateProvider>(
      o.key_file, o.cert_file, o.ca_file,
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(o.refresh_interval))));
}

}  // namespace

namespace {

// OpenSSL frees its global state (locks, RNG) in an atexit handler. gRPC's own threads outlive main and
// may still build an SSL context then (a channel reconnecting after a refused mTLS handshake), and crash
// on the freed locks: a SIGSEGV at exit after the correct error message, seen in ~1 of 6 refused runs.
// Suppressing that handler must happen at OpenSSL's first initialisation, so it runs when this file is
// loaded (and again below, harmlessly); the OS reclaims the memory at exit.
bool keep_openssl_until_exit() {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  return true;
}
[[maybe_unused]] const bool kOpenSslKeptUntilExit = keep_openssl_until_exit();

}  // namespace

void prepare_grpc_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    keep_openssl_until_exit();
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", /*overwrite=*/0);
    // Hold one gRPC initialisation for the life of the process. When the last gRPC object is released on
    // one of gRPC's own threads (e.g. a channel whose connection was refused), grpc_shutdown finishes on a
    // detached thread, and a process that returns from main meanwhile can crash in static destruction.
    // With this reference the count never reaches 0.
    grpc_init();
  });
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const MtlsOptions& o) {
  prepare_grpc_environment();
  if (absl::Status s = validate_mtls_options(o); !s.ok()) return s;
  if (!o.enabled()) return grpc::InsecureServerCredentials();
  gx::TlsServerCredentialsOptions opts(provider(o));
  opts.watch_root_certs();
  opts.watch_identity_key_cert_pairs();
  opts.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!o.peer_uri_prefix.empty()) {
    opts.set_certificate_verifier(gx::ExternalCertificateVerifier::Create<UriPrefixVerifier>(o.peer_uri_prefix));
  } else {
    opts.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  }
  return gx::TlsServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> make_channel_credentials(const MtlsOptions& o) {
  prepare_grpc_environment();
  if (absl::Status s = validate_mtls_options(o); !s.ok()) return s;
  if (!o.enabled()) return grpc::InsecureChannelCredentials();
  gx::TlsChannelCredentialsOptions opts;
  opts.set_certificate_provider(provider(o));
  opts.watch_root_certs();
  opts.watch_identity_key_cert_pairs();
  opts.set_verify_server_certs(true);
  if (!o.peer_uri_prefix.empty()) {
    // The URI SAN replaces the hostname check (SPIFFE style).
    opts.set_certificate_verifier(gx::ExternalCertificateVerifier::Create<UriPrefixVerifier>(o.peer_uri_prefix));
    opts.set_check_call_host(false);
  } else {
    opts.set_certificate_verifier(std::make_shared<gx::HostNameCertificateVerifier>());
  }
  return gx::TlsCredentials(opts);
}

}  // namespace mcx::distributed
