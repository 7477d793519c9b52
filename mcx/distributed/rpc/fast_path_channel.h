// The client side of the coordination service's fast path (the server and the reasons are in
// fast_path_server.h): connections to the coordinator's port that speak fast_path_wire.h, for
// FastPathCoordinationClient (fast_path_client.h).
//
// FastPathConnection: one TCP connection, opened with the hello (which proves the peer speaks the fast path),
// frames written and read with deadlines. FastPathChannel: a pool of them for unary calls, and pipelined
// inserts.
//
// Unary calls: a call takes an idle connection (or opens one), sends one request, waits for its reply until
// the deadline and puts the connection back. A connection that failed or timed out is closed, never reused
// (its late reply would answer the next call). So concurrent calls, including calls that wait long in the
// service (barriers, blocking gets, registration), each use their own connection, and a waiting call wakes
// exactly one thread when its reply arrives: no reader thread hands replies on.
//
// Pipelined inserts (insert_pipelined): key-value inserts that do not wait for their acknowledgements, on a
// connection of their own; flush() waits for them. The channel's key-value, barrier and live-set calls run
// flush() first, so a process always sees its own inserts; the first error among pipelined inserts is returned
// by that flush (then by the call that ran it), so none is lost. Heartbeats and the other calls do not wait
// for pipelined inserts.
//
// Errors: UNAVAILABLE "[coordination] cannot reach the coordination service at ADDR: ..." for a refused, reset
// or closed connection; DEADLINE_EXCEEDED when no reply came in time; FAILED_PRECONDITION when the peer does
// not speak the fast path; a transport-error frame's status (unknown op, malformed request); otherwise OK with
// the response (whose in-band status the caller reads).
//
// Thread-safety: FastPathChannel is thread-safe. A FastPathConnection is used by one thread at a time, except
// shutdown(), which any thread may call.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/message_lite.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/distributed/rpc/handlers.h"
#include "mcx/distributed/rpc/fast_path_wire.h"

namespace mcx::distributed {

struct Frame {
  FrameHeader header;
  std::string payload;
};

class FastPathConnection {
 public:
  // Connects to `address` ("host:port") and exchanges the hello, all before `deadline`.
  static absl::StatusOr<std::unique_ptr<FastPathConnection>> open(const std::string& address, absl::Time deadline);
  ~FastPathConnection();
  FastPathConnection(const FastPathConnection&) = delete;
  FastPathConnection& operator=(const FastPathConnection&) = delete;

  absl::Status write_frame(uint16_t op, uint64_t id, std::string_view payload, absl::Time deadline);
  absl::Status write_frame(uint16_t op, uint64_t id, const google::protobuf::MessageLite& message, absl::Time deadline);
  // The next frame; with `block` false, nullopt when no complete frame has arrived yet.
  absl::StatusOr<std::optional<Frame>> read_frame(absl::Time deadline, bool block);
  // One request, its reply's payload (a transport-error frame becomes its status).
  absl::StatusOr<std::string> exchange(uint16_t op, uint64_t id, std::string_view payload, absl::Time deadline);
  absl::StatusOr<std::string> exchange(uint16_t op, uint64_t id, const google::protobuf::MessageLite& request,
                                       absl::Time deadline);
  // Ends the connection for both directions: a blocked read returns UNAVAILABLE. Any thread.
  void shutdown();

 private:
  FastPathConnection(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  bool wait(short events, absl::Time deadline, std::string* error);
  absl::Status write_encoded(const std::string& frame, absl::Time deadline);
  absl::StatusOr<std::string> read_reply(uint16_t op, uint64_t id, absl::Time deadline);
  absl::Status unavailable(absl::string_view what) const;
  absl::Status deadline_exceeded() const;

  const int fd_;
  const std::string address_;
  std::string in_;  // bytes read and not yet parsed
};

class FastPathChannel {
 public:
  explicit FastPathChannel(std::string address) : address_(std::move(address)) {}
  ~FastPathChannel();  // closes every connection

  const std::string& address() const { return address_; }
  uint64_t next_id() { return next_id_.fetch_add(1); }

  // One request and its reply within `timeout`. On OK, `response` holds the parsed reply.
  absl::Status call(Rpc rpc, const google::protobuf::MessageLite& request, google::protobuf::MessageLite* response,
                    absl::Duration timeout);

  // Sends an insert without waiting for its acknowledgement (see above). Returns an earlier pipelined
  // insert's error, or a transport error for this one (then it was not sent). Blocks only while 1024
  // acknowledgements are outstanding, up to `timeout`.
  absl::Status insert_pipelined(const proto::KvInsertRequest& request, absl::Duration timeout);
  // Waits up to `timeout` until every pipelined insert was acknowledged; returns the first error among them
  // (once). Cheap when none is outstanding.
  absl::Status flush(absl::Duration timeout);

 private:
  // Reads acknowledgements: waits while more than `keep` are outstanding, then takes what has arrived. A
  // failed insert or a broken pipe becomes pipe_error_.
  void read_acks(size_t keep, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);
  // The pipe broke: every outstanding insert is reported lost (in pipe_error_).
  void lose_pipe(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);
  void set_pipe_error(absl::Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);  // keeps the first
  // Returns pipe_error_ and clears it (it is reported once).
  absl::Status take_pipe_error() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pipe_mu_);

  const std::string address_;
  std::atomic<uint64_t> next_id_{1};

  Mutex mu_;
  std::vector<std::unique_ptr<FastPathConnection>> idle_ ABSL_GUARDED_BY(mu_);

  Mutex pipe_mu_;
  std::unique_ptr<FastPathConnection> pipe_ ABSL_GUARDED_BY(pipe_mu_);
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
