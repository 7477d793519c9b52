// Private to the gRPC edge: conversions between the service's C++ structs and coordination.proto.
#pragma once

#include "absl/status/status.h"
#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {

void to_proto(const absl::Status& s, proto::StatusProto* p);
absl::Status from_proto(const proto::StatusProto& p);
void to_proto(const JobState& s, proto::JobStateProto* p);
JobState from_proto(const proto::JobStateProto& p);
void to_proto(const ServiceStatus& s, proto::ServiceStatusResponse* p);
ServiceStatus from_proto(const proto::ServiceStatusResponse& p);

}  // namespace mcx::distributed
