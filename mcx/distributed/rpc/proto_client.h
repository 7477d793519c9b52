// CoordinationClient in wire terms: every call becomes its coordination.proto request, goes through the
// transport's unary(), and its response (status in-band) becomes the result. The two transports (gRPC:
// grpc_client.h; the fast path: fast_path_client.h) implement unary() and the watch stream; the requests are
// built here once.
//
// Errors: the transport's (UNAVAILABLE / DEADLINE_EXCEEDED, messages "[api] ..." naming the coordinator), then
// the service's status. Thread-safety: as the transport (both are thread-safe).
#pragma once

#include <string_view>

#include <google/protobuf/message_lite.h>

#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/rpc/handlers.h"

namespace mcx::distributed {

class ProtoCoordinationClient : public CoordinationClient {
 public:
  absl::StatusOr<RegisterResult> register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                               absl::Duration timeout) override;
  absl::StatusOr<RegisterResult> rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                             uint64_t live_set_generation,
                                             const std::vector<PassedBarrier>& passed_barriers,
                                             absl::Duration timeout) override;
  absl::StatusOr<HeartbeatReply> heartbeat(TaskId task, Incarnation incarnation, absl::Duration timeout) override;
  absl::Status report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                            absl::Duration timeout) override;
  absl::Status shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) override;
  absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                         absl::Duration timeout) override;
  absl::StatusOr<std::string> kv_get(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<std::string> kv_try_get(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta, absl::Duration timeout) override;
  absl::StatusOr<std::vector<KeyValue>> kv_dir(std::string_view dir, absl::Duration timeout) override;
  absl::StatusOr<int64_t> kv_delete(std::string_view key, absl::Duration timeout) override;
  absl::Status barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                       const std::vector<TaskId>& tasks, absl::Duration timeout) override;
  absl::Status cancel_barrier(std::string_view name, int64_t counter, absl::Duration timeout) override;
  absl::Status end_job(std::string_view reason, absl::Duration timeout) override;
  absl::StatusOr<LiveTasks> get_live_tasks(TaskId task, Incarnation incarnation, const LiveSetRequest& request,
                                           absl::Duration timeout) override;
  absl::StatusOr<ServiceStatus> status(absl::Duration timeout) override;

 protected:
  // One request/response exchange within `rpc_timeout`. `api` names the call in transport errors
  // ("[api] cannot reach ..."). With `wait_for_ready` a transport that cannot connect keeps trying until the
  // deadline (a coordinator starting again) instead of failing at once. OK: `response` holds the reply.
  virtual absl::Status unary(Rpc rpc, std::string_view api, const google::protobuf::MessageLite& request,
                             google::protobuf::MessageLite* response, absl::Duration rpc_timeout,
                             bool wait_for_ready) = 0;

 private:
  template <typename Response>
  absl::Status call(std::string_view api, Rpc rpc, const google::protobuf::MessageLite& request, Response* response,
                    absl::Duration rpc_timeout, bool wait_for_ready = false);
  absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout, bool try_only);

  // The last live-set agreement answered per (name, requested set), without payloads: the generation sent as
  // LiveTasksRequest.known_generation, and what a difference (LiveTasksResponse.base_generation) applies to.
  struct HeldLiveSet {
    uint64_t generation = 0;
    std::vector<TaskId> tasks;
    std::vector<Incarnation> incarnations;
  };
  Mutex live_sets_mu_;
  std::map<std::string, HeldLiveSet> held_live_sets_ ABSL_GUARDED_BY(live_sets_mu_);
};

}  // namespace mcx::distributed
