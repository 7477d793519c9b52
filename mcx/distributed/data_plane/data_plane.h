// The data plane between processes: which transport (MCX_COLLECTIVES), which address it binds, and the
// PeerGroup factory that initialize() installs in core (collectives/peer_group.h) so the runtime can build
// process-spanning communicators. See docs/distributed.md and docs/security.md.
//
// Transports: tcp (the default, tcp_data_plane.h: every connection proves it belongs to the job; over TLS 1.3 when
// MCX_DATA_PLANE_TLS=1; between processes of one host through shared memory unless
// MCX_DATA_PLANE_SHARED_MEMORY=0), gloo (Gloo's TCP: plaintext and unauthenticated), mpi (under mpirun).
// Binding: MCX_DATA_PLANE_ADDRESS, else the local address this host uses to reach the coordinator (127.0.0.1
// when the coordinator is on loopback). Never all interfaces.
// With mTLS required (MCX_REQUIRE_MTLS=1) a data plane on a non-loopback address runs over TLS unless
// MCX_ALLOW_PLAINTEXT_DATA_PLANE=1; Gloo (no TLS) is then refused.
// SIGPIPE: the transports ignore it unless the program handles it, so a dead peer fails a collective with an error.
// Thread-safety: start/stop are called by initialize/shutdown (serialised there).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/core/job_key_value.h"
#include "mcx/distributed/security/mtls.h"

namespace mcx::distributed {

struct DataPlaneConfig {
  std::string coordinator_address;  // "host:port"
  int process_id = 0;
  int num_processes = 1;
  MtlsOptions mtls;  // the control plane's: its files serve the data plane's TLS, `require` turns TLS on between hosts
  std::string host;  // this process's host identity (cluster.h): peers with the same one talk through shared memory
};

// The address the data plane binds (see above). Pure apart from the UDP probe that reads the local address of
// the route to the coordinator (no packet is sent).
absl::StatusOr<std::string> data_plane_address(const std::string& coordinator_address);

// Creates the transport (MCX_COLLECTIVES) and installs the factory. kv: the job's key-value store, where the
// transports rendezvous (addresses, the data plane's secret).
absl::Status start_data_plane(std::shared_ptr<JobKeyValue> kv, const DataPlaneConfig& config);

// Uninstalls the factory (Gloo groups already built keep working until dropped; MPI is finalised, so stop the
// data plane only when the job's computations are done).
void stop_data_plane();

}  // namespace mcx::distributed
