// The coordination service's fast path (client side; the server and the reasons are in fast_path_server.h).
// The gRPC client (grpc_client.h) owns one after its task registered and sends the calls the fast path carries
// through it; everything else stays on gRPC.
//
// Connections: a pool. A call takes an idle connection (or opens one: TCP connect, then the hello that checks
// the service incarnation), sends one request, waits for its reply until the deadline and puts the
// connection back. A connection that failed or timed out is closed, never reused (its late reply would
// answer the next call). So concurrent calls, including calls that wait long in the service (barriers,
// blocking gets), each use their own connection, and a blocking call wakes exactly one thread when its reply
// arrives: no reader thread hands replies on.
//
// Pipelined inserts (insert_pipelined): key-value inserts that do not wait for their acknowledgements, on
// a connection of their own; flush() waits for them. Every other call of this client runs flush() first, so a
// process always sees its own inserts; the first error among pipelined inserts is returned by that flush
// (then by the call that ran it), so none is lost.
//
// Errors: UNAVAILABLE "[coordination] cannot reach the coordination service at ADDR (fast path PORT): ..."
// for a refused, reset or closed connection; DEADLINE_EXCEEDED when no reply came in time; FAILED_PRECONDITION
// when the fast path belongs to a different coordinator (another service incarnation); the service's own
// status otherwise (in the response, left to the caller).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/message_lite.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination.pb.h"
#include "mcx/distributed/coordination_service.h"
#include "mcx/distributed/fast_path_wire.h"

namespace mcx::distributed {

class FastPathClient {
 public:
  // `host`: the coordinator's host as the gRPC client was given it; `port`: from the Register response;
  // `service_incarnation`: the service the task registered with. Connects on first use.
  FastPathClient(std::string host, int port, Incarnation service_incarnation);
  ~FastPathClient();  // closes every connection

  // One request and its reply within `timeout`. On OK, `response` holds the parsed reply (whose in-band status
  // the caller reads).
  absl::Status call(FastOp op, const google::protobuf::MessageLite& request, google::protobuf::MessageLite* response,
                    absl::Duration timeout);

  // Sends an insert without waiting for its acknowledgement (see above). Returns an earlier pipelined
  // insert's error, or a transport error for this one (then it was not sent). Blocks only when 1024
  // acknowledgements are outstanding, up to `timeout`.
  absl::Status insert_pipelined(const proto::KvInsertRequest& request, absl::Duration timeout);
  // Waits up to `timeout` until every pipelined insert was acknowledged; returns the first error among them
  // (once). Cheap when none is outstanding.
  absl::Status flush(absl::Duration timeout);

  // Opens one connection now (kept for the next call): UNAVAILABLE / DEADLINE_EXCEEDED when the fast path
  // cannot be reached within `timeout` (a firewall that lets only the gRPC port through).
  absl::Status probe(absl::Duration timeout);
  // Whether a connection ever completed its hello (the fast path is reachable).
  bool reached() const { return reached_.load(); }
  int port() const { return port_; }

 private:
  struct Connection;
  absl::StatusOr<std::unique_ptr<Connection>> open(absl::Time deadline);
  absl::Status exchange(Connection& c, FastOp op, std::string_view payload, std::string* reply, absl::Time deadline);
  // Reads acknowledgements: waits while more than `keep` are outstanding, then takes what has arrived. A
  // failed insert or a broken pipe becomes pipe_error_.
  void read_acks(size_t keep, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);
  // The pipe broke: every outstanding insert is reported lost (in pipe_error_).
  void lose_pipe(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);
  void set_pipe_error(absl::Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);  // keeps the first
  // Returns pipe_error_ and clears it (it is reported once).
  absl::Status take_pipe_error() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);
  absl::Status unavailable(absl::string_view what) const;
  absl::Status deadline_exceeded() const;

  const std::string host_;
  const int port_;
  const Incarnation service_incarnation_;
  std::atomic<bool> reached_{false};
  std::atomic<uint64_t> next_id_{1};

  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ ABSL_GUARDED_BY(mu_);

  Mutex pipe_mu_;
  std::unique_ptr<Connection> pipe_ ABSL_GUARDED_BY(pipe_mu_);
  struct Pending {
    uint64_t id;
    std::string key;
  };
  std::deque<Pending> pipe_pending_ ABSL_GUARDED_BY(pipe_mu_);  // unacknowledged inserts, oldest first
  absl::Status pipe_error_ ABSL_GUARDED_BY(pipe_mu_);
  // Inserts unacknowledged, + 1 while an error waits to be reported (the lock-free check in flush()).
  std::atomic<size_t> pipe_unsettled_{0};
};

}  // namespace mcx::distributed
