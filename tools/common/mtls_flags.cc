#include "tools/common/mtls_flags.h"

#include <CLI/CLI.hpp>

#include "tools/common/env_names.h"

namespace mcx::tools {

void add_mtls_flags(CLI::App& app, MtlsFlags& f, bool per_task) {
  const std::string per = per_task ? " ({id} is replaced by the process id)" : "";
  app.add_option("--mtls-cert", f.cert, "PEM certificate chain of this side" + per)->envname(kEnvMtlsCert)
      ->group("mTLS");
  app.add_option("--mtls-key", f.key, "PEM private key of this side" + per)->envname(kEnvMtlsKey)->group("mTLS");
  app.add_option("--mtls-ca", f.ca, "PEM CA bundle that peers' certificates must chain to")
      ->envname(kEnvMtlsCa)->group("mTLS");
  app.add_option("--mtls-peer-uri-prefix", f.peer_uri_prefix,
                 "require a URI SAN with this prefix on the peer's certificate (must end in '/')")
      ->envname(kEnvMtlsPeerUriPrefix)->group("mTLS");
  app.add_flag("--mtls-bind-identity", f.bind_identity,
               "a task's certificate URI SAN must end in task/<its id>")
      ->envname(kEnvMtlsBindIdentity)->group("mTLS");
  app.add_flag("--require-mtls", f.require, "refuse to run without mTLS")->envname(kEnvRequireMtls)->group("mTLS");
}

distributed::MtlsOptions to_mtls_options(const MtlsFlags& f) {
  distributed::MtlsOptions m;
  m.cert_file = f.cert;
  m.key_file = f.key;
  m.ca_file = f.ca;
  m.peer_uri_prefix = f.peer_uri_prefix;
  m.bind_task_identity = f.bind_identity;
  m.require = f.require;
  return m;
}

}  // namespace mcx::tools
