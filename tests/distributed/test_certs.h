// Certificates for tests, made at test time with the openssl CLI (EC P-256 keys: fast to generate): a CA and
// leaves with DNS:localhost, IP:127.0.0.1 and an optional URI SAN. Used by the mTLS and data-plane TLS tests.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/distributed/security/mtls.h"

#ifndef MCX_OPENSSL_EXECUTABLE
#define MCX_OPENSSL_EXECUTABLE "openssl"
#endif

namespace mcx::distributed {

// A temporary directory of certificates, removed with the object.
class Certs {
 public:
  Certs() {
    char tmpl[] = "/tmp/mcx_mtls_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~Certs() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }

  void run(const std::string& cmd) const {
    std::string full = absl::StrCat("cd '", dir_, "' && ", cmd, " >/dev/null 2>&1");
    ASSERT_EQ(std::system(full.c_str()), 0) << full;
  }
  // ca.pem / ca.key
  void make_ca(const std::string& name) const {
    run(absl::StrCat(MCX_OPENSSL_EXECUTABLE, " req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ",
                     "-keyout ", name, ".key -out ", name, ".pem -days 2 -subj /CN=", name));
  }
  // name.pem / name.key signed by ca, with SANs DNS:localhost, IP:127.0.0.1 and the given URI (if any).
  void make_leaf(const std::string& name, const std::string& ca, const std::string& uri = "") const {
    std::string san = "subjectAltName=DNS:localhost,IP:127.0.0.1";
    if (!uri.empty()) absl::StrAppend(&san, ",URI:", uri);
    {
      std::ofstream ext(path(name + ".ext"));
      ext << san << "\n";
    }
    run(absl::StrCat(MCX_OPENSSL_EXECUTABLE, " req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ",
                     name, ".key -out ", name, ".csr -subj /CN=", name));
    run(absl::StrCat(MCX_OPENSSL_EXECUTABLE, " x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                     ".key -CAcreateserial -days 2 -out ", name, ".pem -extfile ", name, ".ext"));
  }
  MtlsOptions opts(const std::string& leaf, const std::string& ca_file) const {
    MtlsOptions o;
    o.cert_file = path(leaf + ".pem");
    o.key_file = path(leaf + ".key");
    o.ca_file = path(ca_file);
    return o;
  }

 private:
  std::string dir_;
};

}  // namespace mcx::distributed
