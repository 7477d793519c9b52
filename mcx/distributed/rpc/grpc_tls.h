// Private to the gRPC edge: gRPC credentials from MtlsOptions (insecure when mTLS is not enabled).
#pragma once

#include <memory>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

// Sets gRPC's process-wide settings that must be in place before gRPC initialises (its environment
// configuration is read once, at the first grpc_init). Idempotent; called by both factories below, so
// every gRPC use in mcx goes through it. A value the user already exported is left alone.
//  - GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100: with the default 5000 ms, a TLS handshake on a loaded
//    machine can stall in 5 s steps (seen as "Handshake timed out" until the init deadline).
//  - one grpc_init() that is never undone, so gRPC is not torn down on a background thread while the
//    process exits.
void prepare_grpc_environment();

// Both validate the options first (validate_mtls_options), so bad files fail before any connection.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> make_server_credentials(const MtlsOptions& o);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> make_channel_credentials(const MtlsOptions& o);

}  // namespace mcx::distributed
