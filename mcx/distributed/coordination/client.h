// The RPC interface between an agent (or an operator tool) and the coordination service.
//
// Every call is blocking and has a deadline. For the calls that wait inside the service (register,
// barrier, get_live_tasks, kv_get, shutdown_task) `timeout` is the wait the service enforces and reports
// with a precise error; the transport adds a small grace (kRpcGrace) to its own RPC deadline so that the
// service's message, not a generic transport timeout, reaches the caller. For other calls `timeout` is the
// RPC deadline. Transport failures are UNAVAILABLE ("[coordination] cannot reach the coordination
// service at ADDR: ...") or DEADLINE_EXCEEDED.
//
// Three implementations: InProcessClient (below; calls a CoordinationService directly, for unit tests and
// for a process that hosts the service), and two over the network that share their requests
// (rpc/proto_client.h): the gRPC client (rpc/grpc_client.h) and the fast path's (rpc/fast_path_client.h), which
// processes use.
//
// Thread-safety: every method of every implementation is thread-safe; calls may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/coordination/service.h"

namespace mcx::distributed {

// Added by transports to the RPC deadline of calls that wait inside the service.
inline constexpr absl::Duration kRpcGrace = absl::Seconds(2);

// A live subscription to the job state (see CoordinationService::watch). For a task, the stream itself
// is the connection the service monitors: if this process dies, the service sees the stream break.
class WatchStream {
 public:
  virtual ~WatchStream() = default;  // cancels (as cancel()) and releases the stream
  // Blocks until a job state newer than the last one returned arrives (OK), the stream ended (UNAVAILABLE
  // "lost the coordination service at ADDR (...)" when it broke, CANCELLED after cancel()), or
  // `timeout` passed (DEADLINE_EXCEEDED; the stream stays usable).
  virtual absl::StatusOr<JobState> next(absl::Duration timeout) = 0;
  // Ends the stream on purpose (not a connection loss); unblocks next(). Thread-safe, idempotent.
  virtual void cancel() = 0;
};

class CoordinationClient {
 public:
  virtual ~CoordinationClient() = default;

  // A human-readable name of the peer for messages, e.g. "127.0.0.1:5000" or "in-process".
  virtual std::string target() const = 0;

  virtual absl::StatusOr<RegisterResult> register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                       absl::Duration timeout) = 0;
  // Rejoins a coordination service that replaced a lost one, with the task's old incarnation and the newest
  // live-set generation it saw (CoordinationService::rejoin_task); answered at once by the service. `timeout` is
  // the RPC deadline; the gRPC client waits up to it for a connection to the coordinator (it may be starting).
  virtual absl::StatusOr<RegisterResult> rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                                     uint64_t live_set_generation,
                                                     const std::vector<PassedBarrier>& passed_barriers,
                                                     absl::Duration timeout) = 0;
  // Returns the service incarnation (the agent checks that the service did not restart) and the service's clock.
  virtual absl::StatusOr<HeartbeatReply> heartbeat(TaskId task, Incarnation incarnation, absl::Duration timeout) = 0;
  virtual absl::Status report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                                    absl::Duration timeout) = 0;
  // `timeout` bounds the shutdown barrier (the service's own shutdown_timeout also applies).
  virtual absl::Status shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) = 0;

  // task = -1: an observer that is not monitored. `connect_timeout` bounds opening the stream.
  virtual absl::StatusOr<std::unique_ptr<WatchStream>> watch(TaskId task, Incarnation incarnation,
                                                             absl::Duration connect_timeout) = 0;

  virtual absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                                 absl::Duration timeout) = 0;
  // An insert that does not wait for its acknowledgement where the transport can pipeline (the fast path's
  // client, rpc/fast_path_client.cc); elsewhere kv_insert. Later key-value, barrier and live-set calls of this client see it applied.
  // Its error (or one of an earlier pipelined insert) is returned once: by this call, by the client's next
  // key-value, barrier or live-set call, or by kv_flush.
  virtual absl::Status kv_insert_async(std::string_view key, std::string_view value, bool allow_overwrite,
                                           absl::Duration timeout) {
    return kv_insert(key, value, allow_overwrite, timeout);
  }
  // Waits up to `timeout` until every pipelined insert was acknowledged; their first error, once.
  virtual absl::Status kv_flush(absl::Duration /*timeout*/) { return absl::OkStatus(); }
  virtual absl::StatusOr<std::string> kv_get(std::string_view key, absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::string> kv_try_get(std::string_view key, absl::Duration timeout) = 0;
  virtual absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta,
                                               absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::vector<KeyValue>> kv_dir(std::string_view dir, absl::Duration timeout) = 0;
  // Returns the number of keys deleted.
  virtual absl::StatusOr<int64_t> kv_delete(std::string_view key, absl::Duration timeout) = 0;

  virtual absl::Status barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                               const std::vector<TaskId>& tasks, absl::Duration timeout) = 0;
  virtual absl::Status cancel_barrier(std::string_view name, int64_t counter, absl::Duration timeout) = 0;
  // Ends the job (CoordinationService::end_job; over gRPC with identity binding, an admin's certificate only).
  virtual absl::Status end_job(std::string_view reason, absl::Duration timeout) = 0;
  virtual absl::StatusOr<LiveTasks> get_live_tasks(TaskId task, Incarnation incarnation,
                                                   const LiveSetRequest& request, absl::Duration timeout) = 0;

  virtual absl::StatusOr<ServiceStatus> status(absl::Duration timeout) = 0;
};

// Where in-process clients find their coordination service. Tests share one endpoint between several clients
// to take the service away (as when the coordinator process dies) and to bring up another one (as when it is
// started again on the same address). Thread-safe.
class InProcessEndpoint {
 public:
  explicit InProcessEndpoint(CoordinationService* service = nullptr);
  ~InProcessEndpoint();
  // The coordinator "dies": every call in flight through this endpoint fails at once with UNAVAILABLE, every
  // open watch stream ends with UNAVAILABLE (a broken connection; the old service is not told it was lost), and
  // later calls fail with UNAVAILABLE until connect(). Once it returns no client touches the old service again,
  // so it may be destroyed. No-op when already down.
  void disconnect();
  // Points every client of this endpoint at `service` (which must outlive its use here: until disconnect() or
  // the end of the clients). Call disconnect() first when the endpoint has a service.
  void connect(CoordinationService* service);

  struct State;  // implementation detail

 private:
  friend class InProcessClient;
  std::shared_ptr<State> state_;
};

// Calls a CoordinationService in this process. The service must outlive the client (or be taken away with
// InProcessEndpoint::disconnect first). A WatchStream of a task, destroyed without cancel(), reports a lost
// connection to the service, so tests can simulate a process dying; simulate_connection_loss() does the same
// for every stream of this client.
class InProcessClient final : public CoordinationClient {
 public:
  explicit InProcessClient(CoordinationService* service);  // a private endpoint
  explicit InProcessClient(const InProcessEndpoint& endpoint);
  ~InProcessClient() override;

  // Ends every open watch stream of this client as if the connection broke (the tasks fail).
  void simulate_connection_loss();

  std::string target() const override { return "in-process"; }
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
  absl::StatusOr<std::unique_ptr<WatchStream>> watch(TaskId task, Incarnation incarnation,
                                                     absl::Duration connect_timeout) override;
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


 private:
  std::shared_ptr<InProcessEndpoint::State> endpoint_;
};

}  // namespace mcx::distributed
