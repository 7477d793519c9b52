// GlooPeerGroup: the PeerGroup (collectives/peer_group.h) over Gloo's TCP transport.
//
// One Gloo context per group, connected as a full mesh; the rendezvous goes through the coordination
// service's key-value store (gloo/gloo_kv_store.h): rank r's addresses under "mcx/task/<process of r>/data_plane/<key>/<live
// set>.<generation>/r". Messages are Gloo unbound
// buffers (send/recv matched by peer and slot = tag), not Gloo's built-in algorithms: every wait then has a
// deadline and can be aborted from another thread (Gloo's own collectives cannot be interrupted; see
// docs/architecture.md, "Data plane").
//
// Errors: Gloo throws; every exception is caught here and becomes a Status naming the operation, the group and
// the peer process: a closed connection is Unavailable ("process 2 closed the connection: it exited or was
// killed"), a timeout DeadlineExceeded. After an error the context's connections are closed, so the peers'
// pending operations fail at once too, and the group stays poisoned.
// Thread-safety: exchange by one thread at a time; abort and the accessors from any thread.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/job_key_value.h"

namespace mcx::distributed {

// The bound TCP device all of this process's Gloo groups share, created on first use. address: an IP
// address of this host (the data plane never binds all interfaces). Also ignores SIGPIPE (unless the program
// set a handler): Gloo writes without MSG_NOSIGNAL, and a dead peer must be an error, not a signal.
absl::Status init_gloo_device(const std::string& address);

// Connects this process into the group (blocks until every member process joined or request.deadline).
// process_index: this process's job-wide index (must be in request.processes). kv: the job's key-value store,
// for the rendezvous (used only while connecting).
absl::StatusOr<std::unique_ptr<PeerGroup>> connect_gloo_peer_group(const PeerGroupRequest& request, int process_index,
                                                                   JobKeyValue& kv);

}  // namespace mcx::distributed
