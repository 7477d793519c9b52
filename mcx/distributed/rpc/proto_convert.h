// Private to the gRPC edge: conversions between the service's C++ structs and coordination.proto.
#pragma once

#include "absl/status/status.h"
#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {

void to_proto(const absl::Status& s, proto::StatusProto* p);
absl::Status from_proto(const proto::StatusProto& p);
// The watch stream's message for a receiver that holds the state at version `since` (0: none): the tasks changed
// after it (a delta, base_version = since) when the snapshot's history reaches back to it, else the whole state.
void to_proto(const JobStateSnapshot& s, uint64_t since, proto::JobStateProto* p);
// Applies a watch-stream message to the state the receiver holds (`state`, replaced by a whole one). Errors
// (state left unchanged): DataLoss when a delta's base_version is not state's version or it names a task
// outside the state: the stream lost a message, so the receiver must not trust what it holds.
absl::Status apply_proto(const proto::JobStateProto& p, JobState* state);
void to_proto(const ServiceStatus& s, proto::ServiceStatusResponse* p);
ServiceStatus from_proto(const proto::ServiceStatusResponse& p);

}  // namespace mcx::distributed
