#include "mcx/distributed/data_plane/tcp/tls.h"

#include <openssl/err.h>
#include <sys/stat.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error recorded" : out;
}

absl::StatusOr<std::shared_ptr<DataPlaneTls>> DataPlaneTls::create(const MtlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty() || options.ca_file.empty()) {
    return absl::FailedPreconditionError(
        "[data plane tls] MCX_DATA_PLANE_TLS=1 needs the mTLS files (MCX_MTLS_CERT_FILE, MCX_MTLS_KEY_FILE, "
        "MCX_MTLS_CA_FILE): the data plane uses the control plane's certificates");
  }
  const std::string files = file_signature(options);
  MCX_ASSIGN_OR_RETURN(SSL_CTX * ctx, load(options));
  auto tls = std::shared_ptr<DataPlaneTls>(new DataPlaneTls(ctx, options, files));
  tls->checked_ = absl::Now();
  return tls;
}

std::string DataPlaneTls::file_signature(const MtlsOptions& options) {
  std::string out;
  for (const std::string* f : {&options.cert_file, &options.key_file, &options.ca_file}) {
    struct stat st {};
    if (stat(f->c_str(), &st) != 0) {
      out += "missing;";
      continue;
    }
    absl::StrAppend(&out, st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ";");
  }
  return out;
}

void DataPlaneTls::reload_if_changed() const {
  const absl::Time now = absl::Now();
  if (now - checked_ < options_.refresh_interval) return;
  checked_ = now;
  const std::string files = file_signature(options_);
  if (files == files_) return;
  files_ = files;
  absl::StatusOr<SSL_CTX*> fresh = load(options_);
  if (!fresh.ok()) {
    log_warn("[data plane tls] the certificate files changed but do not load; keeping the previous ones: {}",
             std::string(fresh.status().message()));
    return;
  }
  SSL_CTX_free(ctx_);  // connections made from it hold their own reference
  ctx_ = *fresh;
  log_info("[data plane tls] reloaded the certificate files ({})", options_.cert_file);
}

namespace {

// OpenSSL decodes a certificate's extensions (key identifiers, basic constraints, key usage) on first use and
// caches them in the X509 object. The CA certificates of the trust store and our own certificate are shared by
// every connection made from the context, so the first handshakes, which run on the listener's threads at once,
// would fill those caches concurrently. OpenSSL guards that with its own lock, but the library is not built for
// ThreadSanitizer, which then reports the cached key identifier as a race. Decoding them here, once, before the
// context is shared, makes every later handshake a reader of finished objects.
void cache_certificate_extensions(SSL_CTX* ctx) {
  if (X509* own = SSL_CTX_get0_certificate(ctx)) X509_check_purpose(own, -1, 0);
  STACK_OF(X509_OBJECT)* objects = X509_STORE_get0_objects(SSL_CTX_get_cert_store(ctx));
  for (int i = 0; i < sk_X509_OBJECT_num(objects); ++i) {
    if (X509* cert = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i))) X509_check_purpose(cert, -1, 0);
  }
}

}  // namespace

absl::StatusOr<SSL_CTX*> DataPlaneTls::load(const MtlsOptions& options) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("[data plane tls] SSL_CTX_new: ", openssl_errors()));
  auto fail = [&](const std::string& what) {
    absl::Status s = absl::FailedPreconditionError(absl::StrCat("[data plane tls] ", what, ": ", openssl_errors()));
    SSL_CTX_free(ctx);
    return s;
  };
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) return fail("cannot require TLS 1.3");
  if (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1) {
    return fail("cannot set the TLS 1.3 cipher suites");
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    return fail(absl::StrCat("cannot load the certificate chain '", options.cert_file, "'"));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return fail(absl::StrCat("cannot load the private key '", options.key_file, "'"));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return fail(absl::StrCat("the key '", options.key_file, "' does not match the certificate '", options.cert_file, "'"));
  }
  if (SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr) != 1) {
    return fail(absl::StrCat("cannot load the CA bundle '", options.ca_file, "'"));
  }
  cache_certificate_extensions(ctx);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Large tensors are written in pieces from a buffer that stays put between retries; no session tickets (every
  // connection is a full handshake between two processes of the same job).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  return ctx;
}

DataPlaneTls::~DataPlaneTls() { SSL_CTX_free(ctx_); }

absl::StatusOr<SSL*> DataPlaneTls::new_ssl(int fd, bool server) const {
  SSL* ssl = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reload_if_changed();
    ERR_clear_error();
    ssl = SSL_new(ctx_);
  }
  if (ssl == nullptr) return absl::InternalError(absl::StrCat("[data plane tls] SSL_new: ", openssl_errors()));
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::InternalError(absl::StrCat("[data plane tls] SSL_set_fd: ", openssl_errors()));
  }
  if (server) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
  }
  return ssl;
}

absl::Status DataPlaneTls::check_peer(SSL* ssl, int expected_process) const {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("[data plane tls] the peer claiming to be process ", expected_process, " sent no certificate"));
  }
  if (SSL_get_verify_result(ssl) != X509_V_OK) {
    const long r = SSL_get_verify_result(ssl);
    X509_free(cert);
    return absl::PermissionDeniedError(absl::StrCat("[data plane tls] the certificate of the peer claiming to be process ",
                                                    expected_process, " failed verification: ",
                                                    X509_verify_cert_error_string(r)));
  }
  const std::vector<std::string> uris = certificate_uri_sans(cert);
  X509_free(cert);
  const std::string& prefix = options_.peer_uri_prefix;
  bool under_prefix = prefix.empty();
  bool names_process = false;
  for (const std::string& u : uris) {
    if (!prefix.empty() && !absl::StartsWith(u, prefix)) continue;
    under_prefix = true;
    if (task_id_from_uri(u) == expected_process) names_process = true;
  }
  if (!under_prefix) {
    return absl::PermissionDeniedError(absl::StrCat("[data plane tls] the certificate of the peer claiming to be process ",
                                                    expected_process, " has no URI SAN under '", prefix,
                                                    "' (URI SANs: ", absl::StrJoin(uris, ", "), ")"));
  }
  if (options_.bind_task_identity && !names_process) {
    return absl::PermissionDeniedError(absl::StrCat(
        "[data plane tls] the certificate of the peer claiming to be process ", expected_process,
        " does not name task/", expected_process, " (URI SANs: ", uris.empty() ? "none" : absl::StrJoin(uris, ", "),
        ")"));
  }
  return absl::OkStatus();
}

}  // namespace mcx::distributed
