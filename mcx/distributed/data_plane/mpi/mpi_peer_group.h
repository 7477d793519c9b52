// MpiPeerGroup: the PeerGroup (collectives/peer_group.h) over MPI point-to-point messages, for jobs launched by
// mpirun whose fabric MPI already drives (MCX_COLLECTIVES=mpi). Built when the build finds MPI (Debian's
// OpenMPI); otherwise init_mpi() returns Unimplemented and MCX_COLLECTIVES=mpi is refused with that clear error.
//
// - init_mpi() initialises MPI with MPI_THREAD_MULTIPLE (device streams exchange concurrently, each on its own
//   group), unless the program already did; the job's process indices must be the MPI world ranks.
// - Each group is its own communicator (MPI_Comm_create_group over the members' world ranks), so messages of
//   different groups never match each other; within a group, messages are matched by (peer, tag) in order.
// - exchange posts MPI_Isend/MPI_Irecv and polls them with MPI_Test until done, the deadline (the pending
//   receives are cancelled: DeadlineExceeded naming the peers) or abort(). Errors are returned, not fatal
//   (MPI_ERRORS_RETURN), and name the peer's process.
// - Creating a group is collective over its members and has no deadline in MPI itself: a member that never
//   arrives blocks it (the other data-plane operations keep their deadlines).
// - finalize_mpi() runs at shutdown (or at process exit) when init_mpi() initialised MPI.
// Thread-safety: as PeerGroup.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "mcx/collectives/peer_group.h"

namespace mcx::distributed {

// process_id and num_processes must equal the MPI world rank and size (FailedPrecondition otherwise).
absl::Status init_mpi(int process_id, int num_processes);
absl::StatusOr<std::unique_ptr<PeerGroup>> connect_mpi_peer_group(const PeerGroupRequest& request);
void finalize_mpi();

}  // namespace mcx::distributed
