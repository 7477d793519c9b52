#include "mcx/distributed/grpc_client.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "mcx/core/config.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/coordination.grpc.pb.h"
#include "mcx/distributed/fast_path_client.h"
#include "mcx/distributed/fast_path_wire.h"
#include "mcx/distributed/grpc_tls.h"
#include "mcx/distributed/proto_convert.h"

namespace mcx::distributed {
namespace {

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::chrono::system_clock::time_point deadline_after(absl::Duration d) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

int64_t to_ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// A fast-path transport error ("[coordination] ...") as this call's: "[api] ...".
absl::Status with_api(std::string_view api, const absl::Status& s) {
  absl::string_view m = s.message();
  absl::ConsumePrefix(&m, "[coordination] ");
  return absl::Status(s.code(), absl::StrCat("[", A(api), "] ", m));
}

// Transport failure -> Status with a message naming the coordinator.
absl::Status transport_error(std::string_view api, const std::string& target, const grpc::Status& s) {
  std::string msg = absl::StrCat("[", A(api), "] ");
  absl::StatusCode code = static_cast<absl::StatusCode>(s.error_code());
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      absl::StrAppend(&msg, "no answer from the coordination service at ", target, " before the deadline");
      break;
    case grpc::StatusCode::UNAVAILABLE:
      absl::StrAppend(&msg, "cannot reach the coordination service at ", target, ": ", s.error_message());
      break;
    default:
      absl::StrAppend(&msg, "the coordination service at ", target, " refused the call: ", s.error_message());
  }
  return absl::Status(code, msg);
}

class GrpcWatchStream final : public WatchStream {
 public:
  GrpcWatchStream(proto::Coordination::Stub* stub, std::string target, TaskId task, Incarnation inc)
      : target_(std::move(target)) {
    proto::WatchRequest req;
    req.set_task(task);
    req.set_incarnation(inc);
    reader_ = stub->Watch(&ctx_, req);
    thread_ = std::thread([this] { read_loop(); });
  }
  ~GrpcWatchStream() override {
    cancel();
    thread_.join();
  }
  absl::StatusOr<JobState> next(absl::Duration timeout) override {
    MutexLock lock(&mu_);
    auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return latest_.has_value() || !end_.ok(); };
    if (!mu_.await_for(ready, timeout)) {
      return absl::DeadlineExceededError("[watch] no job state change within the timeout");
    }
    if (latest_) {
      JobState s = std::move(*latest_);
      latest_.reset();
      return s;
    }
    return end_;
  }
  void cancel() override {
    {
      MutexLock lock(&mu_);
      if (cancelled_) return;
      cancelled_ = true;
    }
    ctx_.TryCancel();
  }

 private:
  void read_loop() {
    proto::JobStateProto msg;
    while (reader_->Read(&msg)) {
      JobState s = from_proto(msg);
      MutexLock lock(&mu_);
      latest_ = std::move(s);  // newest wins
    }
    grpc::Status st = reader_->Finish();
    MutexLock lock(&mu_);
    if (cancelled_) {
      end_ = absl::CancelledError("[watch] the stream was cancelled");
    } else if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
               st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      end_ = absl::Status(static_cast<absl::StatusCode>(st.error_code()), absl::StrCat("[watch] ", st.error_message()));
    } else {
      end_ = absl::UnavailableError(absl::StrCat("lost the coordination service at ", target_,
                                                 " (watch stream ended: ",
                                                 st.ok() ? std::string("closed by the service") : st.error_message(),
                                                 ")"));
    }
  }

  std::string target_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<proto::JobStateProto>> reader_;
  std::thread thread_;
  Mutex mu_;
  std::optional<JobState> latest_ ABSL_GUARDED_BY(mu_);
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class GrpcClient final : public CoordinationClient {
 public:
  GrpcClient(std::string target, std::shared_ptr<grpc::Channel> channel, bool use_fast_path)
      : target_(std::move(target)),
        channel_(std::move(channel)),
        stub_(proto::Coordination::NewStub(channel_)),
        use_fast_path_(use_fast_path) {}

  std::string target() const override { return target_; }

  // One unary call: deadline, transport errors, then the in-band status.
  template <typename Req, typename Resp, typename Method>
  absl::Status call(std::string_view api, Method method, const Req& req, Resp* resp, absl::Duration timeout,
                    bool wait_for_ready = false) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(timeout));
    ctx.set_wait_for_ready(wait_for_ready);
    grpc::Status s = (stub_.get()->*method)(&ctx, req, resp);
    if (!s.ok()) return transport_error(api, target_, s);
    return from_proto(resp->status());
  }

  // A call the fast path carries: through it once this task registered and reached it, else through gRPC.
  template <typename Req, typename Resp, typename Method>
  absl::Status routed(std::string_view api, FastOp op, Method method, const Req& req, Resp* resp,
                      absl::Duration timeout) {
    if (std::shared_ptr<FastPathClient> fast = fast_path()) {
      absl::Status s = fast->call(op, req, resp, timeout);
      if (!s.ok()) return with_api(api, s);
      return from_proto(resp->status());
    }
    return call(api, method, req, resp, timeout);
  }

  std::shared_ptr<FastPathClient> fast_path() {
    MutexLock lock(&fast_mu_);
    return fast_;
  }

  // After (re)registering: uses the service's fast path when it has one and this client reaches it (one
  // connection, opened now, within 1 s); else every call goes through gRPC, as before.
  void adopt_fast_path(const proto::RegisterResponse& resp) {
    std::shared_ptr<FastPathClient> fast;
    const std::string host = address_host(target_);
    if (use_fast_path_ && resp.fast_path_port() != 0 && !host.empty()) {
      fast = std::make_shared<FastPathClient>(host, resp.fast_path_port(), resp.service_incarnation());
      if (absl::Status s = fast->probe(absl::Seconds(1)); !s.ok()) {
        log_warn("[coordination] the coordinator's fast path is not reachable ({}); using gRPC for every call "
                 "(set MCX_COORDINATION_FAST_PATH=0 to skip the attempt)", std::string(s.message()));
        fast.reset();
      }
    }
    MutexLock lock(&fast_mu_);
    fast_ = std::move(fast);
  }

  absl::StatusOr<RegisterResult> register_task(TaskId task, Incarnation incarnation, int num_tasks,
                                               absl::Duration timeout) override {
    proto::RegisterRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    req.set_num_tasks(num_tasks);
    req.set_timeout_ms(to_ms(timeout));
    proto::RegisterResponse resp;
    absl::Status s = call("register_task", &proto::Coordination::Stub::Register, req, &resp, timeout + kRpcGrace);
    if (!s.ok()) return s;
    adopt_fast_path(resp);
    return RegisterResult{resp.service_incarnation()};
  }

  absl::StatusOr<RegisterResult> rejoin_task(TaskId task, Incarnation incarnation, int num_tasks,
                                             uint64_t live_set_generation, absl::Duration timeout) override {
    proto::RegisterRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    req.set_num_tasks(num_tasks);
    req.set_rejoin(true);
    req.set_live_set_generation(live_set_generation);
    proto::RegisterResponse resp;
    // Waits (up to the deadline) for the channel to reconnect to a coordinator that is starting again, instead of
    // failing at once while the channel backs off: the rejoin happens as soon as the connection is up.
    absl::Status s = call("rejoin_task", &proto::Coordination::Stub::Register, req, &resp, timeout,
                          /*wait_for_ready=*/true);
    if (!s.ok()) return s;
    adopt_fast_path(resp);
    return RegisterResult{resp.service_incarnation()};
  }

  absl::StatusOr<Incarnation> heartbeat(TaskId task, Incarnation incarnation, absl::Duration timeout) override {
    proto::HeartbeatRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    proto::HeartbeatResponse resp;
    absl::Status s = call("heartbeat", &proto::Coordination::Stub::Heartbeat, req, &resp, timeout);
    if (!s.ok()) return s;
    return resp.service_incarnation();
  }

  absl::Status report_error(TaskId task, Incarnation incarnation, const absl::Status& error,
                            absl::Duration timeout) override {
    proto::ReportErrorRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    to_proto(error, req.mutable_error());
    proto::StatusResponse resp;
    return call("report_error", &proto::Coordination::Stub::ReportError, req, &resp, timeout);
  }

  absl::Status shutdown_task(TaskId task, Incarnation incarnation, absl::Duration timeout) override {
    proto::ShutdownRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    req.set_timeout_ms(to_ms(timeout));
    proto::StatusResponse resp;
    return call("shutdown_task", &proto::Coordination::Stub::Shutdown, req, &resp, timeout + kRpcGrace);
  }

  absl::StatusOr<std::unique_ptr<WatchStream>> watch(TaskId task, Incarnation incarnation,
                                                     absl::Duration) override {
    return std::unique_ptr<WatchStream>(new GrpcWatchStream(stub_.get(), target_, task, incarnation));
  }

  absl::Status kv_insert(std::string_view key, std::string_view value, bool allow_overwrite,
                         absl::Duration timeout) override {
    proto::KvInsertRequest req;
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    req.set_allow_overwrite(allow_overwrite);
    proto::StatusResponse resp;
    return routed("kv_insert", FastOp::kKvInsert, &proto::Coordination::Stub::KvInsert, req, &resp, timeout);
  }

  absl::Status kv_insert_pipelined(std::string_view key, std::string_view value, bool allow_overwrite,
                                   absl::Duration timeout) override {
    std::shared_ptr<FastPathClient> fast = fast_path();
    if (!fast) return kv_insert(key, value, allow_overwrite, timeout);
    proto::KvInsertRequest req;
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    req.set_allow_overwrite(allow_overwrite);
    return fast->insert_pipelined(req, timeout);
  }

  absl::Status kv_flush(absl::Duration timeout) override {
    std::shared_ptr<FastPathClient> fast = fast_path();
    return fast ? fast->flush(timeout) : absl::OkStatus();
  }

  absl::StatusOr<std::string> get(std::string_view key, absl::Duration timeout, bool try_only) {
    proto::KvGetRequest req;
    req.set_key(std::string(key));
    req.set_timeout_ms(to_ms(timeout));
    req.set_try_only(try_only);
    proto::KvGetResponse resp;
    absl::Status s = routed(try_only ? "kv_try_get" : "kv_get", FastOp::kKvGet, &proto::Coordination::Stub::KvGet, req,
                            &resp, try_only ? timeout : timeout + kRpcGrace);
    if (!s.ok()) return s;
    return std::move(*resp.mutable_value());
  }
  absl::StatusOr<std::string> kv_get(std::string_view key, absl::Duration timeout) override {
    return get(key, timeout, false);
  }
  absl::StatusOr<std::string> kv_try_get(std::string_view key, absl::Duration timeout) override {
    return get(key, timeout, true);
  }

  absl::StatusOr<int64_t> kv_increment(std::string_view key, int64_t delta, absl::Duration timeout) override {
    proto::KvIncrementRequest req;
    req.set_key(std::string(key));
    req.set_delta(delta);
    proto::KvIncrementResponse resp;
    absl::Status s = routed("kv_increment", FastOp::kKvIncrement, &proto::Coordination::Stub::KvIncrement, req, &resp, timeout);
    if (!s.ok()) return s;
    return resp.value();
  }

  absl::StatusOr<std::vector<KeyValue>> kv_dir(std::string_view dir, absl::Duration timeout) override {
    proto::KvDirRequest req;
    req.set_dir(std::string(dir));
    proto::KvDirResponse resp;
    absl::Status s = routed("kv_dir", FastOp::kKvDir, &proto::Coordination::Stub::KvDir, req, &resp, timeout);
    if (!s.ok()) return s;
    std::vector<KeyValue> out;
    out.reserve(resp.entries_size());
    for (auto& e : *resp.mutable_entries()) out.push_back({std::move(*e.mutable_key()), std::move(*e.mutable_value())});
    return out;
  }

  absl::StatusOr<int64_t> kv_delete(std::string_view key, absl::Duration timeout) override {
    proto::KvDeleteRequest req;
    req.set_key(std::string(key));
    proto::KvDeleteResponse resp;
    absl::Status s = routed("kv_delete", FastOp::kKvDelete, &proto::Coordination::Stub::KvDelete, req, &resp, timeout);
    if (!s.ok()) return s;
    return resp.deleted();
  }

  absl::Status barrier(TaskId task, Incarnation incarnation, std::string_view name, int64_t counter,
                       const std::vector<TaskId>& tasks, absl::Duration timeout) override {
    proto::BarrierRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    req.set_name(std::string(name));
    req.set_counter(counter);
    for (TaskId t : tasks) req.add_tasks(t);
    req.set_timeout_ms(to_ms(timeout));
    proto::StatusResponse resp;
    return routed("barrier", FastOp::kBarrier, &proto::Coordination::Stub::Barrier, req, &resp, timeout + kRpcGrace);
  }

  absl::Status cancel_barrier(std::string_view name, int64_t counter, absl::Duration timeout) override {
    proto::CancelBarrierRequest req;
    req.set_name(std::string(name));
    req.set_counter(counter);
    proto::StatusResponse resp;
    return routed("cancel_barrier", FastOp::kCancelBarrier, &proto::Coordination::Stub::CancelBarrier, req, &resp, timeout);
  }

  absl::StatusOr<LiveTasks> get_live_tasks(TaskId task, Incarnation incarnation, const LiveSetRequest& request,
                                           absl::Duration timeout) override {
    proto::LiveTasksRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    for (TaskId t : request.tasks) req.add_tasks(t);
    req.set_name(request.name);
    req.set_payload(request.payload);
    req.set_timeout_ms(to_ms(timeout));
    proto::LiveTasksResponse resp;
    absl::Status s = routed("get_live_tasks", FastOp::kLiveTasks, &proto::Coordination::Stub::GetLiveTasks, req, &resp, timeout + kRpcGrace);
    if (!s.ok()) return s;
    LiveTasks out;
    out.tasks.assign(resp.tasks().begin(), resp.tasks().end());
    out.incarnations.assign(resp.incarnations().begin(), resp.incarnations().end());
    out.payloads.assign(resp.payloads().begin(), resp.payloads().end());
    out.generation = resp.generation();
    if (out.payloads.size() != out.tasks.size()) {
      return absl::InternalError(absl::StrCat("[get_live_tasks] the coordination service answered with ",
                                              out.tasks.size(), " tasks but ", out.payloads.size(),
                                              " payloads (an older coordinator?)"));
    }
    return out;
  }

  absl::StatusOr<ServiceStatus> status(absl::Duration timeout) override {
    proto::ServiceStatusRequest req;
    proto::ServiceStatusResponse resp;
    absl::Status s = call("status", &proto::Coordination::Stub::GetStatus, req, &resp, timeout);
    if (!s.ok()) return s;
    return from_proto(resp);
  }

 private:
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Coordination::Stub> stub_;
  const bool use_fast_path_;
  Mutex fast_mu_;
  std::shared_ptr<FastPathClient> fast_ ABSL_GUARDED_BY(fast_mu_);  // set by (re)registration
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationClient>> make_grpc_client(GrpcClientOptions options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("[coordination] the coordinator address is empty (expected host:port)");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = make_channel_credentials(options.mtls);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Processes may start before the coordinator: retry connecting quickly.
  // (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left alone: gRPC uses it as the minimum connect timeout, and a
  // small value aborts every connection attempt.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // After a refused connection the channel re-resolves the address before trying again; gRPC rate-limits
  // that (several seconds), which would delay joining a job whose coordinator starts a moment late.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  // Never route the control plane through an HTTP proxy from http_proxy/https_proxy (a proxy that cannot
  // reach the coordinator makes every call hang until its deadline; JAX warns about the same trap).
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // A private channel per client, so agents of one process do not share a broken connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(options.address, *creds, args);
  absl::StatusOr<bool> fast_path = kCoordinationFastPathFlag.resolve(options.fast_path);
  if (!fast_path.ok()) return fast_path.status();
  return std::unique_ptr<CoordinationClient>(
      new GrpcClient(options.address, std::move(channel), *fast_path && !options.mtls.enabled()));
}

}  // namespace mcx::distributed
