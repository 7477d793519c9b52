// The gRPC implementation of CoordinationClient. gRPC headers stay in grpc_client.cc.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

struct GrpcClientOptions {
  std::string address;  // "host:port" of the coordination service
  MtlsOptions mtls;     // used as given (apply mtls_options_from_env first if wanted)
};

// HTTP proxies (http_proxy, https_proxy) are never used for the coordinator.
// Creates a client; does not connect (the first call does, waiting for the server up to its deadline).
// Errors: InvalidArgument for an empty address; the mTLS validation errors (mtls.h), before any
// connection is tried.
absl::StatusOr<std::unique_ptr<CoordinationClient>> make_grpc_client(GrpcClientOptions options);

}  // namespace mcx::distributed
