#include "mcx/distributed/security/mtls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {
namespace {

struct BioFree { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Free { void operator()(X509* x) const { X509_free(x); } };
struct PkeyFree { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
struct StoreFree { void operator()(X509_STORE* s) const { X509_STORE_free(s); } };
struct StoreCtxFree { void operator()(X509_STORE_CTX* s) const { X509_STORE_CTX_free(s); } };

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not valid PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::string> read_file(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("[mtls] cannot read ", what, " file '", path, "': ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("[mtls] ", what, " file '", path, "' is empty"));
  }
  return ss.str();
}

std::vector<std::unique_ptr<X509, X509Free>> parse_certs(const std::string& pem) {
  std::vector<std::unique_ptr<X509, X509Free>> out;
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // the loop ends on a "no start line" error
  return out;
}

bool env_true(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it != env.end() && (it->second == "1" || it->second == "true" || it->second == "TRUE" || it->second == "yes");
}

}  // namespace

MtlsOptions mtls_options_from_env(MtlsOptions o, const std::map<std::string, std::string>& env) {
  auto fill = [&env](std::string& field, const char* name) {
    if (!field.empty()) return;
    auto it = env.find(name);
    if (it != env.end()) field = it->second;
  };
  fill(o.cert_file, "MCX_MTLS_CERT_FILE");
  fill(o.key_file, "MCX_MTLS_KEY_FILE");
  fill(o.ca_file, "MCX_MTLS_CA_FILE");
  fill(o.peer_uri_prefix, "MCX_MTLS_PEER_URI_PREFIX");
  if (env_true(env, "MCX_MTLS_BIND_TASK_IDENTITY")) o.bind_task_identity = true;
  if (env_true(env, "MCX_REQUIRE_MTLS")) o.require = true;
  return o;
}

absl::Status validate_mtls_options(const MtlsOptions& o) {
  if (!o.enabled()) {
    if (o.require) {
      return absl::FailedPreconditionError(
          "[mtls] mTLS is required (MCX_REQUIRE_MTLS=1) but no certificate, key and CA were given (set "
          "MCX_MTLS_CERT_FILE, MCX_MTLS_KEY_FILE and MCX_MTLS_CA_FILE)");
    }
    if (!o.peer_uri_prefix.empty() || o.bind_task_identity) {
      return absl::InvalidArgumentError(
          "[mtls] a peer URI prefix or task identity binding was set without mTLS certificate, key and CA files");
    }
    return absl::OkStatus();
  }
  if (o.cert_file.empty() || o.key_file.empty() || o.ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[mtls] mTLS needs all of a certificate, a key and a CA file; missing:", o.cert_file.empty() ? " certificate" : "",
        o.key_file.empty() ? " key" : "", o.ca_file.empty() ? " CA" : ""));
  }
  if (!o.peer_uri_prefix.empty() && o.peer_uri_prefix.back() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("[mtls] the peer URI prefix '", o.peer_uri_prefix,
                                                   "' must end in '/' (otherwise 'spiffe://a.org' would also match "
                                                   "'spiffe://a.org.evil')"));
  }
  if (o.refresh_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError("[mtls] refresh_interval must be at least 1 s");
  }
  absl::StatusOr<std::string> cert = read_file("certificate", o.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = read_file("key", o.key_file);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = read_file("CA", o.ca_file);
  if (!ca.ok()) return ca.status();

  auto chain = parse_certs(*cert);
  if (chain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[mtls] certificate file '", o.cert_file, "' holds no PEM certificate"));
  }
  std::unique_ptr<BIO, BioFree> kbio(BIO_new_mem_buf(key->data(), static_cast<int>(key->size())));
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr));
  if (!pkey) {
    return absl::InvalidArgumentError(
        absl::StrCat("[mtls] key file '", o.key_file, "' holds no PEM private key: ", openssl_error()));
  }
  if (X509_check_private_key(chain[0].get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("[mtls] key file '", o.key_file,
                                                   "' does not match the certificate in '", o.cert_file, "'"));
  }
  auto cas = parse_certs(*ca);
  if (cas.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("[mtls] CA file '", o.ca_file, "' holds no PEM certificate"));
  }
  // A certificate that does not chain to our own CA bundle is legal (peers may use another CA) but is
  // usually a mistake: warn, do not refuse.
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (auto& c : cas) X509_STORE_add_cert(store.get(), c.get());
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted, chain[i].get());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), chain[0].get(), untrusted);
  int ok = X509_verify_cert(ctx.get());
  int err = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(untrusted);
  ERR_clear_error();
  if (ok != 1) {
    log_warn("[mtls] certificate '{}' does not verify against the CA file '{}' ({}); peers that trust only "
                 "that CA will refuse it",
                 o.cert_file, o.ca_file, X509_verify_cert_error_string(err));
  }
  return absl::OkStatus();
}

std::vector<std::string> certificate_uri_sans(const x509_st* cert) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type != GEN_URI) continue;
    const ASN1_IA5STRING* s = n->d.uniformResourceIdentifier;
    out.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), ASN1_STRING_length(s));
  }
  GENERAL_NAMES_free(names);
  return out;
}

absl::StatusOr<std::vector<std::string>> certificate_uri_sans(const std::string& pem) {
  auto certs = parse_certs(pem);
  if (certs.empty()) return absl::InvalidArgumentError("[mtls] no PEM certificate given");
  return certificate_uri_sans(certs[0].get());
}

std::optional<int> task_id_from_uri(const std::string& uri) {
  size_t pos = uri.rfind("task/");
  if (pos == std::string::npos) return std::nullopt;
  if (pos > 0 && uri[pos - 1] != '/') return std::nullopt;  // "/task/<id>" or a bare "task/<id>"
  std::string_view digits(uri);
  digits.remove_prefix(pos + 5);
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int id = 0;
  for (char c : digits) id = id * 10 + (c - '0');
  return id;
}

}  // namespace mcx::distributed
