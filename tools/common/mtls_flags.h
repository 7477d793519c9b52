// The mTLS command-line flags shared by mcx-coordinator, mcx-ctl and mcx-run. Each flag also reads its
// MCX_* environment variable (CLI11 envname), so a tool started by mcx-run or inside a job picks them up.
#pragma once

#include <string>

#include "mcx/distributed/security/mtls.h"

namespace CLI {
class App;
}

namespace mcx::tools {

struct MtlsFlags {
  std::string cert;             // --mtls-cert / MCX_MTLS_CERT_FILE
  std::string key;              // --mtls-key / MCX_MTLS_KEY_FILE
  std::string ca;               // --mtls-ca / MCX_MTLS_CA_FILE
  std::string peer_uri_prefix;  // --mtls-peer-uri-prefix / MCX_MTLS_PEER_URI_PREFIX (must end in '/')
  bool bind_identity = false;   // --mtls-bind-identity / MCX_MTLS_BIND_TASK_IDENTITY
  bool require = false;         // --require-mtls / MCX_REQUIRE_MTLS
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// Adds the flags to app. per_task: the help says "{id}" in cert/key paths becomes the process id (mcx-run).
void add_mtls_flags(CLI::App& app, MtlsFlags& flags, bool per_task);

// The library's options for these flags (validated later by the client/server constructors).
distributed::MtlsOptions to_mtls_options(const MtlsFlags& flags);

}  // namespace mcx::tools
