// TcpPeerGroup: the PeerGroup (collectives/peer_group.h) of the data plane's own transport, over connections that
// TcpDataPlane (tcp_data_plane.h) set up and authenticated.
//
// exchange(): every connection is non-blocking (a connection to a process of the same host carries its bytes
// through shared memory, its socket waking the other side: stream.h); one poll loop moves all posted sends (a 16-byte header {tag,
// bytes} then the payload, written straight from the caller's buffer; small messages in one write) and receives
// (read straight into the posted buffer). A message that arrives before its receive is posted is kept until the
// exchange that posts it, in arrival order per (peer, tag). Contract as PeerGroup's, with two differences from
// Gloo's: a message longer than its receive fails the exchange with InvalidArgument naming both sizes (Gloo ends
// the process), and a peer may not be this rank (InvalidArgument).
// Failures: a closed connection fails an exchange only when the exchange needs that peer (a pending receive,
// earliest first, or an unwritten send), so the process a ring waits for is the one blamed. A process whose group
// is poisoned sends each peer a goodbye frame (reserved tag 2^64-1) with the reason before closing: a peer that
// reads it fails with ProcessFailure of the process the reason names (mark_process_failure), else of the leaver,
// and the reason in the message.
// Thread-safety: as PeerGroup (exchange on one thread at a time; abort from any).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mcx/collectives/peer_group.h"
#include "mcx/distributed/data_plane/tcp/stream.h"

namespace mcx::distributed {

// streams[r] is the connection to rank r (null for this rank); processes are the job-wide indices by rank.
std::unique_ptr<PeerGroup> make_tcp_peer_group(std::vector<std::unique_ptr<DataPlaneStream>> streams,
                                               std::vector<int> processes, int rank, std::string key, bool tls);

}  // namespace mcx::distributed
