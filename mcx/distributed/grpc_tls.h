// Private to the gRPC edge: gRPC credentials from MtlsOptions (insecure when mTLS is not enabled).
#pragma once

#include <memory>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "mcx/distributed/mtls.h"

namespace mcx::distributed {

// Both validate the options first (validate_mtls_options), so bad files fail before any connection.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const MtlsOptions& o);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> make_channel_credentials(const MtlsOptions& o);

}  // namespace mcx::distributed
