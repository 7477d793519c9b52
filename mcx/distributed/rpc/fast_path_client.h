// CoordinationClient over the coordination service's fast path (fast_path_server.h, fast_path_channel.h):
// what an agent uses when mTLS is off (distributed.h picks it; MCX_COORDINATION_FAST_PATH=0 picks gRPC).
// No gRPC runtime is started in the process: a unary call is one frame out and one back on a pooled
// connection, and the watch stream is a connection of its own that next() reads directly (no reader
// thread). The calls mean what they mean over gRPC (coordination/client.h); in addition kv_insert_async
// does not wait for acknowledgements (fast_path_channel.h).
//
// Errors as the gRPC client's: UNAVAILABLE / DEADLINE_EXCEEDED "[api] cannot reach the coordination service at
// ADDR: ...", then the service's status; FAILED_PRECONDITION when the coordinator does not speak the fast path
// (started with MCX_COORDINATION_FAST_PATH=0 or with mTLS). Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/coordination/client.h"

namespace mcx::distributed {

// `address`: "host:port" of the coordinator. Does not connect (the first call does).
// Errors: InvalidArgument for an address that is not host:port.
absl::StatusOr<std::unique_ptr<CoordinationClient>> make_fast_path_client(const std::string& address);

}  // namespace mcx::distributed
