#include "mcx/distributed/rpc/grpc_client.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/rpc/coordination.grpc.pb.h"
#include "mcx/distributed/rpc/proto_client.h"
#include "mcx/distributed/rpc/grpc_tls.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::chrono::system_clock::time_point deadline_after(absl::Duration d) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
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
    JobState state;  // the messages applied so far (each a whole state or the tasks changed since the one before)
    absl::Status broken;
    while (reader_->Read(&msg)) {
      broken = apply_proto(msg, &state);
      if (!broken.ok()) {
        ctx_.TryCancel();  // Finish() below then returns at once
        break;
      }
      MutexLock lock(&mu_);
      latest_ = state;  // newest wins
    }
    grpc::Status st = reader_->Finish();
    MutexLock lock(&mu_);
    if (!broken.ok()) {
      end_ = absl::UnavailableError(broken.message());
    } else if (cancelled_) {
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

class GrpcClient final : public ProtoCoordinationClient {
 public:
  GrpcClient(std::string target, std::shared_ptr<grpc::Channel> channel)
      : target_(std::move(target)), channel_(std::move(channel)), stub_(proto::Coordination::NewStub(channel_)) {}

  std::string target() const override { return target_; }

  absl::StatusOr<std::unique_ptr<WatchStream>> watch(TaskId task, Incarnation incarnation,
                                                     absl::Duration) override {
    return std::unique_ptr<WatchStream>(new GrpcWatchStream(stub_.get(), target_, task, incarnation));
  }

 protected:
  absl::Status unary(Rpc rpc, std::string_view api, const google::protobuf::MessageLite& req,
                     google::protobuf::MessageLite* resp, absl::Duration timeout, bool wait_for_ready) override {
    using S = proto::Coordination::Stub;
    switch (rpc) {
      case Rpc::kRegister: return invoke(&S::Register, api, req, resp, timeout, wait_for_ready);
      case Rpc::kHeartbeat: return invoke(&S::Heartbeat, api, req, resp, timeout, wait_for_ready);
      case Rpc::kReportError: return invoke(&S::ReportError, api, req, resp, timeout, wait_for_ready);
      case Rpc::kShutdown: return invoke(&S::Shutdown, api, req, resp, timeout, wait_for_ready);
      case Rpc::kKvInsert: return invoke(&S::KvInsert, api, req, resp, timeout, wait_for_ready);
      case Rpc::kKvGet: return invoke(&S::KvGet, api, req, resp, timeout, wait_for_ready);
      case Rpc::kKvIncrement: return invoke(&S::KvIncrement, api, req, resp, timeout, wait_for_ready);
      case Rpc::kKvDir: return invoke(&S::KvDir, api, req, resp, timeout, wait_for_ready);
      case Rpc::kKvDelete: return invoke(&S::KvDelete, api, req, resp, timeout, wait_for_ready);
      case Rpc::kBarrier: return invoke(&S::Barrier, api, req, resp, timeout, wait_for_ready);
      case Rpc::kCancelBarrier: return invoke(&S::CancelBarrier, api, req, resp, timeout, wait_for_ready);
      case Rpc::kLiveTasks: return invoke(&S::GetLiveTasks, api, req, resp, timeout, wait_for_ready);
      case Rpc::kStatus: return invoke(&S::GetStatus, api, req, resp, timeout, wait_for_ready);
      case Rpc::kEndJob: return invoke(&S::EndJob, api, req, resp, timeout, wait_for_ready);
      case Rpc::kWatch: break;  // a stream: watch()
    }
    return absl::InternalError(absl::StrCat("[", A(api), "] not a unary call: ", static_cast<int>(rpc)));
  }

 private:
  // One blocking stub call with its deadline; transport failures become a Status naming the coordinator.
  template <typename Req, typename Resp>
  absl::Status invoke(grpc::Status (proto::Coordination::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                      std::string_view api, const google::protobuf::MessageLite& req,
                      google::protobuf::MessageLite* resp, absl::Duration timeout, bool wait_for_ready) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(timeout));
    ctx.set_wait_for_ready(wait_for_ready);
    grpc::Status s = (stub_.get()->*method)(&ctx, static_cast<const Req&>(req), static_cast<Resp*>(resp));
    if (!s.ok()) return transport_error(api, target_, s);
    return absl::OkStatus();
  }

  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Coordination::Stub> stub_;
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
  return std::unique_ptr<CoordinationClient>(new GrpcClient(options.address, std::move(channel)));
}

}  // namespace mcx::distributed
