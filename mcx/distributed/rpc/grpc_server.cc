#include "mcx/distributed/rpc/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_posix.h>

#include <functional>
#include <type_traits>
#include <optional>
#include <string_view>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/config.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/rpc/coordination.grpc.pb.h"
#include "mcx/distributed/rpc/handlers.h"
#include "mcx/distributed/rpc/fast_path_server.h"
#include "mcx/distributed/rpc/grpc_tls.h"
#include "mcx/distributed/security/principal.h"
#include "mcx/distributed/rpc/proto_convert.h"
#include "mcx/distributed/security/rate_limiter.h"

namespace mcx::distributed {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;


// A unary call answered later by a service callback. The callback may fire after the call was
// cancelled and even after the reactor is gone (server shutdown): the shared state makes that a no-op.
class PendingCall final : public ServerUnaryReactor {
 public:
  struct State {
    Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;
    PendingCall* call = nullptr;
  };
  PendingCall() : state_(std::make_shared<State>()) { state_->call = this; }
  // `on_cancel` runs once if the call is cancelled before it finished (the client's process died, its
  // connection broke or it gave up). Set it before handing the reactor to gRPC.
  explicit PendingCall(std::function<void()> on_cancel) : PendingCall() { on_cancel_ = std::move(on_cancel); }
  const std::shared_ptr<State>& state() const { return state_; }

  // Fills the response and finishes OK, unless the call already ended. Thread-safe.
  template <typename Fill>
  static void complete(const std::shared_ptr<State>& st, Fill&& fill) {
    MutexLock lock(&st->mu);
    if (st->finished) return;
    st->finished = true;
    fill();
    st->call->Finish(grpc::Status::OK);
  }
  void OnCancel() override {
    std::function<void()> on_cancel;
    {
      MutexLock lock(&state_->mu);
      if (state_->finished) return;
      state_->finished = true;
      on_cancel = std::move(on_cancel_);  // this object may be deleted once Finish is called
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "[coordination] call cancelled"));
    }
    if (on_cancel) on_cancel();  // outside the lock: it may call into the service, which may complete calls
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<State> state_;
  std::function<void()> on_cancel_;
};

// The service implementation for the callback API: every handler returns at once; handlers whose
// service call waits finish the reactor from the service's callback.
class Handler final : public proto::Coordination::CallbackService {
 public:
  Handler(CoordinationService* s, bool bind_identity, std::string uri_prefix, std::shared_ptr<AuditLog> audit,
          std::shared_ptr<PeerRateLimiter> limiter)
      : s_(s), bind_identity_(bind_identity), uri_prefix_(std::move(uri_prefix)), audit_(std::move(audit)),
        limiter_(std::move(limiter)), rate_limited_(&rate_limited_requests(*s).with({"grpc"})) {}

  // Finishes every open watch stream (server shutdown).
  void close_all_watches();

  // The caller's identity from its certificate's URI SANs; nullopt when identity binding is off (every
  // caller trusted).
  std::optional<Principal> principal(CallbackServerContext* ctx) const {
    if (!bind_identity_) return std::nullopt;
    // The URI SANs gRPC extracted from the verified client certificate at the handshake (no parsing per call).
    auto auth = ctx->auth_context();
    std::vector<std::string> uris;
    if (auth) {
      for (const auto& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) uris.emplace_back(uri.data(), uri.size());
    }
    return principal_from_uri_sans(uris, uri_prefix_);
  }

  // The per-peer rate limit (rate_limiter.h; the peer is its principal, or its connection without identity
  // binding), then the call-level rule (docs/security.md, "Authorization"): a task-scoped call (acting: the
  // request's task) only by that task's certificate; any other call by any role (the key and barrier rules
  // are the service's). Records denials and admin calls in the audit log.
  absl::Status authorize(CallbackServerContext* ctx, const std::optional<Principal>& who, Rpc rpc,
                         std::optional<TaskId> acting) {
    if (limiter_) {
      if (absl::Status limited = limiter_->admit(who ? who->to_string() : ctx->peer()); !limited.ok()) {
        rate_limited_->add();
        if (who) audit("denied", *who, rpc, std::string(limited.message()));
        return limited;
      }
    }
    if (!who) return absl::OkStatus();
    absl::Status s;
    if (acting && (who->role != Role::kTask || who->task != *acting)) {
      s = absl::PermissionDeniedError(absl::StrCat(
          "[coordination] task identity binding: the client certificate has no URI SAN ending in 'task/", *acting,
          "' (its URI SANs: ", who->uris.empty() ? "none" : absl::StrJoin(who->uris, ", "), "); it cannot act as task ",
          *acting));
    } else if (who->role == Role::kNone) {
      s = absl::PermissionDeniedError(absl::StrCat("[authz] ", who->to_string(), " may not call ",
                                                   std::string(rpc_name(rpc)), ": a certificate needs a URI SAN ending in task/<id>, "
                                                   "operator/<name> or admin/<name>"));
    } else if (who->role == Role::kOperator && !read_only(rpc)) {
      s = absl::PermissionDeniedError(absl::StrCat("[authz] ", who->to_string(), " may not call ",
                                                   std::string(rpc_name(rpc)), ": an operator may only read (GetStatus, KvGet, KvDir, Watch)"));
    }
    if (!s.ok()) {
      audit("denied", *who, rpc, std::string(s.message()));
    } else if (who->role == Role::kAdmin) {
      audit("admin", *who, rpc, "");
    }
    return s;
  }

  ServerUnaryReactor* Register(CallbackServerContext* ctx, const proto::RegisterRequest* req,
                               proto::RegisterResponse* resp) override {
    const std::optional<Principal> who = principal(ctx);
    if (absl::Status id = authorize(ctx, who, Rpc::kRegister, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    // A registration waits for the other tasks; its process dying meanwhile cancels the call, and the service
    // learns of it at once (no heartbeats flow before the job is assembled). A rejoin is answered at once.
    std::function<void()> on_cancel;
    if (!req->rejoin()) {
      on_cancel = [s = s_, task = req->task(), incarnation = req->incarnation()] {
        s->registration_abandoned(task, incarnation);
      };
    }
    const std::string what = absl::StrCat(req->rejoin() ? "rejoin" : "registration", " of task ", req->task(),
                                          " (incarnation ", req->incarnation(), ")");
    const std::string identity = who ? who->to_string() : "unauthenticated";
    return answer(serve_register, req, resp, std::move(on_cancel),
                  [this, what, identity](const proto::RegisterResponse& r) {
                    const absl::Status s = from_proto(r.status());
                    audit("register", identity, Rpc::kRegister, s.ok() ? what + ": OK" : what + ": " + s.ToString());
                  });
  }
  ServerUnaryReactor* Heartbeat(CallbackServerContext* ctx, const proto::HeartbeatRequest* req,
                                proto::HeartbeatResponse* resp) override {
    if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kHeartbeat, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    return answer(serve_heartbeat, req, resp);
  }
  ServerUnaryReactor* ReportError(CallbackServerContext* ctx, const proto::ReportErrorRequest* req,
                                  proto::StatusResponse* resp) override {
    const std::optional<Principal> who = principal(ctx);
    if (absl::Status id = authorize(ctx, who, Rpc::kReportError, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    audit("error_report", who ? who->to_string() : "unauthenticated", Rpc::kReportError,
          absl::StrCat("task ", req->task(), ": ", from_proto(req->error()).ToString()));
    return answer(serve_report_error, req, resp);
  }
  ServerUnaryReactor* Shutdown(CallbackServerContext* ctx, const proto::ShutdownRequest* req,
                               proto::StatusResponse* resp) override {
    if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kShutdown, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    return answer(serve_shutdown, req, resp);
  }

  grpc::ServerWriteReactor<proto::JobStateProto>* Watch(CallbackServerContext* ctx,
                                                        const proto::WatchRequest* req) override;

  ServerUnaryReactor* KvInsert(CallbackServerContext* ctx, const proto::KvInsertRequest* req,
                               proto::StatusResponse* resp) override {
    return answer_as(ctx, Rpc::kKvInsert, serve_kv_insert, req, resp);
  }
  ServerUnaryReactor* KvGet(CallbackServerContext* ctx, const proto::KvGetRequest* req,
                            proto::KvGetResponse* resp) override {
    return answer_as(ctx, Rpc::kKvGet, serve_kv_get, req, resp);
  }
  ServerUnaryReactor* KvIncrement(CallbackServerContext* ctx, const proto::KvIncrementRequest* req,
                                  proto::KvIncrementResponse* resp) override {
    return answer_as(ctx, Rpc::kKvIncrement, serve_kv_increment, req, resp);
  }
  ServerUnaryReactor* KvDir(CallbackServerContext* ctx, const proto::KvDirRequest* req,
                            proto::KvDirResponse* resp) override {
    return answer_as(ctx, Rpc::kKvDir, serve_kv_dir, req, resp);
  }
  ServerUnaryReactor* KvDelete(CallbackServerContext* ctx, const proto::KvDeleteRequest* req,
                               proto::KvDeleteResponse* resp) override {
    return answer_as(ctx, Rpc::kKvDelete, serve_kv_delete, req, resp);
  }
  ServerUnaryReactor* Barrier(CallbackServerContext* ctx, const proto::BarrierRequest* req,
                              proto::StatusResponse* resp) override {
    if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kBarrier, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    return answer(serve_barrier, req, resp);
  }
  ServerUnaryReactor* CancelBarrier(CallbackServerContext* ctx, const proto::CancelBarrierRequest* req,
                                    proto::StatusResponse* resp) override {
    return answer_as(ctx, Rpc::kCancelBarrier, serve_cancel_barrier, req, resp);
  }
  ServerUnaryReactor* GetLiveTasks(CallbackServerContext* ctx, const proto::LiveTasksRequest* req,
                                   proto::LiveTasksResponse* resp) override {
    if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kLiveTasks, req->task()); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    return answer(serve_live_tasks, req, resp);
  }

  ServerUnaryReactor* GetStatus(CallbackServerContext* ctx, const proto::ServiceStatusRequest* req,
                                proto::ServiceStatusResponse* resp) override {
    if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kStatus, std::nullopt); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    return answer(serve_status, req, resp);
  }

  ServerUnaryReactor* EndJob(CallbackServerContext* ctx, const proto::EndJobRequest* req,
                             proto::StatusResponse* resp) override {
    // Audited as an admin call (or a denial); the job error naming the admin and the reason follows as job_failed.
    return answer_as(ctx, Rpc::kEndJob, serve_end_job, req, resp);
  }

  CoordinationService* service() { return s_; }

  void audit(std::string_view event, const Principal& who, Rpc rpc, std::string_view detail) {
    audit(event, who.to_string(), rpc, detail);
  }
  void audit(std::string_view event, const std::string& identity, Rpc rpc, std::string_view detail) {
    if (audit_) audit_->record(event, identity, rpc_name(rpc), detail);
  }

  class WatchReactor;
  Mutex mu_;
  std::set<WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

 private:
  static bool read_only(Rpc rpc) {
    return rpc == Rpc::kStatus || rpc == Rpc::kKvGet || rpc == Rpc::kKvDir || rpc == Rpc::kWatch;
  }

  // Answers through the transport-neutral handler (rpc/handlers.h). The response is moved in under the
  // call's lock, so a reply that comes after the call was cancelled (or the server shut down) is dropped.
  // `observe` (optional) sees the response first (the audit log).
  template <typename Request, typename Response>
  ServerUnaryReactor* answer(void (*serve)(CoordinationService&, const Request&, Reply<Response>), const Request* req,
                             Response* resp, std::function<void()> on_cancel = nullptr,
                             std::type_identity_t<std::function<void(const Response&)>> observe = nullptr) {
    auto* call = new PendingCall(std::move(on_cancel));
    serve(*s_, *req, [st = call->state(), resp, observe = std::move(observe)](Response r) {
      if (observe) observe(r);
      PendingCall::complete(st, [&] { *resp = std::move(r); });
    });
    return call;
  }
  // A call the service authorizes against the caller (the KV writes and cancel_barrier): the call-level rule
  // first, then the service's, whose refusals go to the audit log too.
  template <typename Request, typename Response>
  ServerUnaryReactor* answer_as(CallbackServerContext* ctx, Rpc rpc,
                                void (*serve)(CoordinationService&, const Request&, Reply<Response>,
                                              const Caller&),
                                const Request* req, Response* resp) {
    const std::optional<Principal> who = principal(ctx);
    if (absl::Status id = authorize(ctx, who, rpc, std::nullopt); !id.ok()) {
      return fail(ctx->DefaultReactor(), id, resp->mutable_status());
    }
    auto* call = new PendingCall();
    serve(*s_, *req,
          [this, st = call->state(), resp, who, rpc](Response r) {
            if (who && r.status().code() == static_cast<int>(absl::StatusCode::kPermissionDenied)) {
              audit("denied", *who, rpc, std::string(r.status().message()));
            }
            PendingCall::complete(st, [&] { *resp = std::move(r); });
          },
          who ? Caller(*who) : Caller::trusted());  // without identity binding every caller is trusted
    return call;
  }
  static ServerUnaryReactor* fail(ServerUnaryReactor* r, const absl::Status& s, proto::StatusProto* out) {
    to_proto(s, out);
    r->Finish(grpc::Status::OK);
    return r;
  }
  CoordinationService* s_;
  bool bind_identity_;
  std::string uri_prefix_;
  std::shared_ptr<AuditLog> audit_;  // may be null
  std::shared_ptr<PeerRateLimiter> limiter_;  // null: no limit
  metrics::Counter* rate_limited_;
};

// The long-lived stream of one task (or observer). Writes the newest job state, one write at a time: the whole
// state first, then the tasks changed since the last write.
// When the call ends for any reason other than our own Finish (client died, connection broke, client
// cancelled), the service is told the connection was lost.
class Handler::WatchReactor final : public grpc::ServerWriteReactor<proto::JobStateProto> {
 public:
  WatchReactor(Handler* h, TaskId task, Incarnation inc) : h_(h), task_(task), inc_(inc) {}

  void start() {
    {
      MutexLock lock(&h_->mu_);
      if (h_->closing_) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "[coordination] the coordination service is stopping"));
        return;
      }
      h_->watches_.insert(this);
    }
    absl::StatusOr<uint64_t> id = h_->service()->watch(
        task_, inc_, [this](const std::shared_ptr<const JobStateSnapshot>& s) { on_state(s); });
    MutexLock lock(&mu_);
    if (!id.ok()) {
      finish_locked(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string(id.status().message())));
      return;
    }
    watch_id_ = *id;
  }

  void on_state(const std::shared_ptr<const JobStateSnapshot>& s) {
    MutexLock lock(&mu_);
    if (finished_) return;
    newest_ = s;
    write_next_locked();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {  // the stream broke
      finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    write_next_locked();
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    finish_locked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      MutexLock lock(&h_->mu_);
      h_->watches_.erase(this);
    }
    uint64_t id;
    bool lost;
    {
      MutexLock lock(&mu_);
      id = watch_id_;
      lost = !server_closed_;
      watch_id_ = 0;
    }
    // After end_watch returns, on_state never runs again: safe to delete.
    if (id != 0) h_->service()->end_watch(id, lost);
    delete this;
  }

  // Server shutdown: end the stream with UNAVAILABLE.
  void close() {
    MutexLock lock(&mu_);
    server_closed_ = true;
    finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "[coordination] the coordination service is stopping"));
  }

 private:
  void write_next_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_ || !newest_ || (sent_version_ != 0 && newest_->version() <= sent_version_)) return;
    current_.Clear();
    to_proto(*newest_, sent_version_, &current_);
    sent_version_ = newest_->version();
    writing_ = true;
    StartWrite(&current_);
  }
  void finish_locked(grpc::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(s));
  }

  Handler* h_;
  TaskId task_;
  Incarnation inc_;
  Mutex mu_;
  uint64_t watch_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool server_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<const JobStateSnapshot> newest_ ABSL_GUARDED_BY(mu_);
  uint64_t sent_version_ ABSL_GUARDED_BY(mu_) = 0;  // of the last state written (0: none yet)
  proto::JobStateProto current_ ABSL_GUARDED_BY(mu_);  // being written
};

grpc::ServerWriteReactor<proto::JobStateProto>* Handler::Watch(CallbackServerContext* ctx,
                                                               const proto::WatchRequest* req) {
  auto* w = new WatchReactor(this, req->task(), req->incarnation());
  const std::optional<TaskId> acting = req->task() >= 0 ? std::optional<TaskId>(req->task()) : std::nullopt;
  if (absl::Status id = authorize(ctx, principal(ctx), Rpc::kWatch, acting); !id.ok()) {
    w->Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(id.message())));
    return w;
  }
  w->start();
  return w;
}

void Handler::close_all_watches() {
  {
    MutexLock lock(&mu_);
    closing_ = true;
  }
  // Holding mu_ keeps every reactor alive (OnDone erases itself under mu_ before deleting); gRPC never
  // runs OnDone inline from Finish.
  MutexLock lock(&mu_);
  for (WatchReactor* w : watches_) w->close();
}

}  // namespace

struct GrpcCoordinationServer::Impl {
  std::unique_ptr<FastPathServer> fast_path;
  std::unique_ptr<Handler> handler;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  Mutex mu;
  bool shut = false;
};

absl::StatusOr<std::unique_ptr<GrpcCoordinationServer>> GrpcCoordinationServer::start(CoordinationService* service,
                                                                                     GrpcServerOptions options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = make_server_credentials(options.mtls);
  if (!creds.ok()) return creds.status();
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<bool> fast_path = kCoordinationFastPathFlag.resolve(options.fast_path);
  if (!fast_path.ok()) return fast_path.status();
  // With the fast path, its listener owns the port and hands gRPC the connections that speak HTTP/2; with
  // mTLS gRPC listens itself (the fast path has no TLS).
  const bool shared_port = *fast_path && !options.mtls.enabled();
  absl::StatusOr<int64_t> rate = kCoordinatorRateLimitFlag.resolve(options.rate_limit);
  if (!rate.ok()) return rate.status();
  auto limiter = *rate > 0 ? std::make_shared<PeerRateLimiter>(*rate) : nullptr;
  impl->handler = std::make_unique<Handler>(service, options.mtls.enabled() && options.mtls.bind_task_identity,
                                            options.mtls.peer_uri_prefix, options.audit_log, limiter);
  grpc::ServerBuilder b;
  if (!shared_port) b.AddListeningPort(options.bind_address, *creds, &impl->port);
  b.RegisterService(impl->handler.get());
  b.SetMaxReceiveMessageSize(64 << 20);
  b.SetMaxSendMessageSize(64 << 20);
  // Detect dead peers on idle connections (a host that vanished without closing its sockets).
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC sets SO_REUSEPORT by default, which lets a second coordinator bind a port that is in use and
  // silently split the job between two services; refuse instead.
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  impl->server = b.BuildAndStart();
  const std::string cannot_bind = absl::StrCat("[coordination] cannot bind '", options.bind_address,
                                               "' (address in use, or not a valid host:port)");
  if (!impl->server || (!shared_port && impl->port == 0)) return absl::UnavailableError(cannot_bind);
  if (shared_port) {
    grpc::Server* server = impl->server.get();
    absl::StatusOr<std::unique_ptr<FastPathServer>> fp = FastPathServer::start(
        service, options.bind_address, [server](int fd) { grpc::AddInsecureChannelFromFd(server, fd); }, limiter,
        options.fast_path_threads > 0 ? options.fast_path_threads
                                      : FastPathServer::default_reactor_threads(service->options().num_tasks));
    if (!fp.ok()) {
      impl->server->Shutdown();
      return absl::UnavailableError(absl::StrCat(cannot_bind, ": ", fp.status().message()));
    }
    impl->fast_path = std::move(*fp);
    impl->port = impl->fast_path->port();
  }
  return std::unique_ptr<GrpcCoordinationServer>(new GrpcCoordinationServer(std::move(impl)));
}

GrpcCoordinationServer::GrpcCoordinationServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcCoordinationServer::~GrpcCoordinationServer() { shutdown(); }

int GrpcCoordinationServer::port() const { return impl_->port; }

bool GrpcCoordinationServer::serves_fast_path() const { return impl_->fast_path != nullptr; }

void GrpcCoordinationServer::shutdown(absl::Duration grace) {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->shut) return;
    impl_->shut = true;
  }
  if (impl_->fast_path) impl_->fast_path->shutdown();
  impl_->handler->close_all_watches();
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
  impl_->server->Wait();
}

}  // namespace mcx::distributed
