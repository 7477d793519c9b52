// The data plane's own transport (MCX_COLLECTIVES=tcp): PeerGroups (collectives/peer_group.h) over TCP connections that
// prove they belong to the job, optionally inside TLS 1.3 (MCX_DATA_PLANE_TLS=1). Gloo's TCP transport accepts
// whoever connects first to a pair's port and sends tensors in the clear; this one authenticates every
// connection (handshake.h) and can encrypt it (tls.h). docs/security.md, "Data plane".
//
// TcpDataPlane (one per process): a DataPlaneListener on the data-plane address, published under the process's
// own key prefix ("mcx/task/<p>/data_plane/address", which only that task may write). connect() builds a group:
// for each peer of lower rank it connects to that process's listener, runs the TLS handshake and the certificate
// check when TLS is on, and the secret handshake naming the group, its live set and generation; peers of higher
// rank connect to it, and their connections are taken from the listener. A failed attempt is retried until the
// deadline with the address fetched afresh (a restarted process publishes a new one), except a listener that
// failed its proof or certificate check at the address still published: that refusal is final.
//
// Each connection then negotiates shared memory (shared_memory_link.h): between processes of the same host its
// bytes go through a shared-memory segment, the socket only waking the other side and reporting its end.
//
// The groups themselves are TcpPeerGroups (tcp_peer_group.h).
//
// Errors: connect() PermissionDenied when a peer's listener fails its proof or certificate check (names it);
// DeadlineExceeded naming the process that did not connect, or could not be reached, in time, with the last
// reason (e.g. "closed the connection during the handshake": it refused this process's certificate); the
// reported failure of a peer the coordination service declared dead while the group was being connected
// (marked as its failure: a rendezvous never waits out its deadline for a dead process); each prefixed with
// the group, its processes, live set and generation.
// Thread-safety: TcpDataPlane is thread-safe; groups follow PeerGroup's contract.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/job_key_value.h"
#include "mcx/distributed/data_plane/tcp/listener.h"
#include "mcx/distributed/data_plane/tcp/tls.h"

namespace mcx::distributed {

class TcpDataPlane {
 public:
  struct Options {
    int process = 0;
    std::string address;                // the IP the listener binds
    std::shared_ptr<DataPlaneTls> tls;  // null: plaintext (still authenticated)
    std::shared_ptr<JobKeyValue> kv;    // the job's key-value store (addresses, the secret)
    // This process's host identity: a connection to a process with the same one carries its bytes through shared
    // memory (shared_memory_link.h). Empty: TCP only.
    std::string host;
  };
  // Starts the listener and publishes its address.
  static absl::StatusOr<std::shared_ptr<TcpDataPlane>> start(Options options);

  absl::StatusOr<std::unique_ptr<PeerGroup>> connect(const PeerGroupRequest& request);

  static std::string address_key(int process);
  const std::string& address() const { return listener_->address(); }
  // Connections the listener refused (failed a check, or too many handshakes at once).
  int64_t refused_connections() const { return listener_->refused(); }

 private:
  explicit TcpDataPlane(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<DataPlaneStream>> handshake_with(const std::string& address,
                                                                  const DataPlaneHello& hello,
                                                                  const std::string& secret, absl::Time deadline);
  absl::StatusOr<std::unique_ptr<DataPlaneStream>> connect_to(const std::string& group, int my_rank, int peer_rank,
                                                              int peer_process, const std::string& secret,
                                                              absl::Time deadline);
  Options options_;
  std::unique_ptr<DataPlaneListener> listener_;
};

}  // namespace mcx::distributed
