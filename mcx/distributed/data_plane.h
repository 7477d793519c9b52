// The data plane between processes: which transport (MCX_COLLECTIVES), which address it binds, and the
// PeerGroup factory that initialize() installs in core (core/peer_group.h) so the runtime can build
// process-spanning communicators. See docs/distributed.md and docs/security.md.
//
// Transports: tcp (the default, tcp_data_plane.h: every connection proves it belongs to the job; over TLS 1.3 when
// MCX_DATA_PLANE_TLS=1), gloo (Gloo's TCP: plaintext and unauthenticated), mpi (under mpirun).
// Binding: MCX_DATA_PLANE_ADDRESS, else the local address this host uses to reach the coordinator (127.0.0.1
// when the coordinator is on loopback). Never all interfaces.
// With mTLS required (MCX_REQUIRE_MTLS=1) a data plane on a non-loopback address runs over TLS unless
// MCX_ALLOW_PLAINTEXT_DATA_PLANE=1; Gloo (no TLS) is then refused.
// SIGPIPE: the transports ignore it unless the program handles it, so a dead peer fails a collective with an error.
// Thread-safety: start/stop are called by initialize/shutdown (serialised there).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mcx/distributed/coordination_agent.h"
#include "mcx/distributed/mtls.h"

namespace mcx::distributed {

struct DataPlaneConfig {
  std::string coordinator_address;  // "host:port"
  int process_id = 0;
  int num_processes = 1;
  MtlsOptions mtls;  // the control plane's: its files serve the data plane's TLS, `require` turns TLS on between hosts
};

// The address the data plane binds (see above). Pure apart from the UDP probe that reads the local address of
// the route to the coordinator (no packet is sent).
absl::StatusOr<std::string> data_plane_address(const std::string& coordinator_address);

// Creates the transport (MCX_COLLECTIVES) and installs the factory. agent must stay
// valid until stop_data_plane().
absl::Status start_data_plane(CoordinationAgent* agent, const DataPlaneConfig& config);

// Collectives abort on failure: aborts every data-plane group (core/peer_group.h) that includes a task in
// state ERROR in `state` (once per failed task and incarnation; later states repeat the list), with Unavailable
// marked as that process's failure (mcx::ProcessFailure when thrown), naming the process and the service's
// reason. It also records the failure (core/live_set.h), so groups built later with that process fail at once
// instead of waiting for it in the rendezvous, until the process is seen live again with a new incarnation. initialize() calls it for every job state the watch stream
// delivers, so a collective waiting for a dead or hung process fails as soon as the service declares it
// failed (heartbeat timeout, or at once when its connection drops), in both failure modes.
void abort_groups_of_failed_tasks(const JobState& state);

// Uninstalls the factory (Gloo groups already built keep working until dropped; MPI is finalised, so stop the
// data plane only when the job's computations are done).
void stop_data_plane();

}  // namespace mcx::distributed
