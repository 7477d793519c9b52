#include "mcx/distributed/rpc/fast_path_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/rpc/fast_path_connection.h"
#include "mcx/distributed/rpc/fast_path_wire.h"
#include "mcx/distributed/rpc/handlers.h"
#include "mcx/distributed/rpc/listen_socket.h"
#include "mcx/distributed/rpc/proto_convert.h"
#include "mcx/distributed/security/rate_limiter.h"

namespace mcx::distributed {
namespace {

constexpr uint64_t kListenerId = 0;
constexpr uint64_t kWakeId = 1;

void send_error(FastPathConnection& c, const FrameHeader& h, const absl::Status& s) {
  proto::StatusProto p;
  to_proto(s, &p);
  c.send(encode_frame(h.op, kFlagTransportError, h.id, p.SerializeAsString()));
}

}  // namespace

// The newest job state as serialized JobStateProto messages, one per version a watch stream sent last (the
// delta from it; 0: the whole state), each encoded once and shared by every watch stream that had that version:
// an N-task job has N watchers, mostly at the same version, and encoding per watcher made each change cost
// O(N^2) protobuf work in the coordinator (docs/distributed.md, "Scale").
class EncodedJobState {
 public:
  std::shared_ptr<const std::string> get(const JobStateSnapshot& s, uint64_t since) {
    MutexLock lock(&mu_);
    if (version_ != s.version() || incarnation_ != s.state().service_incarnation) {
      by_since_.clear();
      version_ = s.version();
      incarnation_ = s.state().service_incarnation;
    }
    std::shared_ptr<const std::string>& bytes = by_since_[since];
    if (!bytes) {
      proto::JobStateProto p;
      to_proto(s, since, &p);
      bytes = std::make_shared<const std::string>(p.SerializeAsString());
    }
    return bytes;
  }

 private:
  Mutex mu_;
  std::map<uint64_t, std::shared_ptr<const std::string>> by_since_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
};

namespace {
class Reactor;
}  // namespace

struct FastPathServer::Impl {
  CoordinationService* service = nullptr;
  std::shared_ptr<EncodedJobState> encoded_state = std::make_shared<EncodedJobState>();
  std::function<void(int)> hand_off;
  std::shared_ptr<PeerRateLimiter> limiter;  // null: no limit
  // The service's metrics of this transport (in its registry, which outlives the server).
  metrics::Counter* received_bytes = nullptr;
  metrics::Counter* sent_bytes = nullptr;
  metrics::Counter* rate_limited = nullptr;
  int listener = -1;
  int port = 0;
  std::vector<std::unique_ptr<Reactor>> reactors;  // [0] also accepts
  std::atomic<uint64_t> next_connection_id{2};     // unique across reactors (the rate limit names peers by it)
  std::atomic<size_t> next_reactor{0};
  Mutex mu;
  bool shut ABSL_GUARDED_BY(mu) = false;

  ~Impl() {
    if (listener >= 0) ::close(listener);
  }

  // Reactor 0: accepts every pending connection, handing them to the reactors in turn.
  void accept_all();
  void stop();

  // A new connection's first bytes decide: the fast path's magic keeps it here; anything else (gRPC's HTTP/2
  // preface) goes to hand_off with the bytes unread. kWait while fewer than 4 bytes have arrived.
  enum class Sniff { kWait, kFastPath, kHandedOff, kBroken };
  Sniff sniff(const std::shared_ptr<FastPathConnection>& c) {
    unsigned char magic[4];
    ssize_t r = ::recv(c->fd(), magic, sizeof magic, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return Sniff::kBroken;
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? Sniff::kWait : Sniff::kBroken;
    if (r < 4) return Sniff::kWait;
    uint32_t v = magic[0] | (magic[1] << 8) | (magic[2] << 16) | (static_cast<uint32_t>(magic[3]) << 24);
    if (v == kFastPathMagic) return Sniff::kFastPath;
    const int fd = c->fd();
    c->close(/*server_stopping=*/false, /*release=*/true);
    hand_off(fd);
    return Sniff::kHandedOff;
  }

  // Reads what is there and serves every complete frame. False when the connection ended or broke.
  bool read_and_serve(const std::shared_ptr<FastPathConnection>& c, bool hung_up) {
    if (!c->sniffed) {
      switch (sniff(c)) {
        case Sniff::kWait: return !hung_up;  // fewer than 4 bytes from a peer that hung up: never more
        case Sniff::kBroken: return false;
        case Sniff::kHandedOff: return false;  // no longer ours: the reactor forgets it (already released)
        case Sniff::kFastPath: c->sniffed = true;
      }
    }
    char buf[65536];
    bool open = true;
    while (true) {
      ssize_t r = ::recv(c->fd(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        received_bytes->add(static_cast<double>(r));
        c->in.append(buf, static_cast<size_t>(r));
        if (static_cast<size_t>(r) < sizeof buf) break;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      open = false;  // EOF or error: serve what arrived complete, then close
      break;
    }
    size_t pos = 0;
    c->cork();
    while (c->in.size() - pos >= kFastPathHeaderBytes) {
      absl::StatusOr<FrameHeader> h = decode_frame_header(c->in.data() + pos);
      if (!h.ok()) {
        log_warn("{}; closing that connection", std::string(h.status().message()));
        return false;
      }
      if (c->in.size() - pos - kFastPathHeaderBytes < h->length) break;  // the rest has not arrived
      serve(c, *h, std::string_view(c->in).substr(pos + kFastPathHeaderBytes, h->length));
      pos += kFastPathHeaderBytes + h->length;
    }
    c->in.erase(0, pos);
    return c->uncork() && open;
  }

  template <typename Request>
  bool parse(Request& req, const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    if (req.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return true;
    send_error(*c, h, absl::InvalidArgumentError(absl::StrCat("[coordination] fast path: the payload of op ", h.op,
                                                              " (", payload.size(), " bytes) is not a valid request")));
    return false;
  }

  template <typename Response>
  static Reply<Response> reply_to(const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h) {
    return [c, op = h.op, id = h.id](Response r) { c->send(encode_frame(op, 0, id, r)); };
  }

  template <typename Request, typename Response>
  void run_request(void (*handler)(CoordinationService&, const Request&, Reply<Response>),
                   const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    Request req;
    if (parse(req, c, h, payload)) handler(*service, req, reply_to<Response>(c, h));
  }

  // A call authorized against its caller: the fast path binds no identity (it runs only without mTLS, where every
  // caller is trusted: docs/security.md), so it says so.
  template <typename Request, typename Response>
  void run_as_trusted(void (*handler)(CoordinationService&, const Request&, Reply<Response>, const Caller&),
                      const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    Request req;
    if (parse(req, c, h, payload)) handler(*service, req, reply_to<Response>(c, h), Caller::trusted());
  }

  // A registration waits for the other tasks; its connection closing meanwhile (the process died) tells the
  // service at once, as a cancelled gRPC call does.
  void serve_registration(const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    proto::RegisterRequest req;
    if (!parse(req, c, h, payload)) return;
    auto answered = std::make_shared<std::atomic<bool>>(false);
    if (!req.rejoin()) {
      c->on_close([s = service, task = req.task(), incarnation = req.incarnation(), answered](bool server_stopping) {
        if (!server_stopping && !answered->load()) s->registration_abandoned(task, incarnation);
      });
    }
    serve_register(*service, req, [reply = reply_to<proto::RegisterResponse>(c, h), answered](proto::RegisterResponse r) {
      answered->store(true);
      reply(std::move(r));
    });
  }

  // The watch stream: one frame per job state, on this connection until it closes; its closing (other than
  // by a server shutdown) is a lost connection for the service, as the gRPC stream's end. The first frame is the
  // whole state, each later one the tasks changed since the frame before (the service never runs one watcher's
  // deliveries concurrently, so `sent` needs no lock of its own).
  void serve_watch(const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    proto::WatchRequest req;
    if (!parse(req, c, h, payload)) return;
    auto sent = std::make_shared<uint64_t>(0);
    absl::StatusOr<uint64_t> id = service->watch(
        req.task(), req.incarnation(),
        [c, op = h.op, frame_id = h.id, encoded = encoded_state, sent](const std::shared_ptr<const JobStateSnapshot>& s) {
          c->send(encode_frame(op, 0, frame_id, *encoded->get(*s, *sent)));
          *sent = s->version();
        });
    if (!id.ok()) return send_error(*c, h, id.status());
    c->on_close([s = service, id = *id](bool server_stopping) { s->end_watch(id, /*connection_lost=*/!server_stopping); });
  }

  void serve(const std::shared_ptr<FastPathConnection>& c, const FrameHeader& h, std::string_view payload) {
    if (h.op == kHelloOp) {
      c->send(encode_frame(h.op, 0, h.id, std::string_view()));
      return;
    }
    if (limiter) {
      if (absl::Status limited = limiter->admit(c->peer()); !limited.ok()) {
        rate_limited->add();
        return send_error(*c, h, limited);
      }
    }
    switch (static_cast<Rpc>(h.op)) {
      case Rpc::kRegister: return serve_registration(c, h, payload);
      case Rpc::kWatch: return serve_watch(c, h, payload);
      case Rpc::kHeartbeat: return run_request(serve_heartbeat, c, h, payload);
      case Rpc::kReportError: return run_request(serve_report_error, c, h, payload);
      case Rpc::kShutdown: return run_request(serve_shutdown, c, h, payload);
      case Rpc::kStatus: return run_request(serve_status, c, h, payload);
      case Rpc::kEndJob: return run_as_trusted(serve_end_job, c, h, payload);
      case Rpc::kKvInsert: return run_as_trusted(serve_kv_insert, c, h, payload);
      case Rpc::kKvGet: return run_as_trusted(serve_kv_get, c, h, payload);
      case Rpc::kKvIncrement: return run_as_trusted(serve_kv_increment, c, h, payload);
      case Rpc::kKvDir: return run_as_trusted(serve_kv_dir, c, h, payload);
      case Rpc::kKvDelete: return run_as_trusted(serve_kv_delete, c, h, payload);
      case Rpc::kBarrier: return run_request(serve_barrier, c, h, payload);
      case Rpc::kCancelBarrier: return run_as_trusted(serve_cancel_barrier, c, h, payload);
      case Rpc::kLiveTasks: return run_request(serve_live_tasks, c, h, payload);
    }
    send_error(*c, h, absl::UnimplementedError(absl::StrCat("[coordination] fast path: unknown op ", h.op,
                                                            " (a client newer than this coordinator?)")));
  }
};

namespace {

thread_local const Reactor* current_reactor = nullptr;  // the reactor whose thread this is, if any

// One epoll loop over its share of the connections. The accepting reactor hands each new connection to one
// reactor in turn (adopt); a reactor's thread alone reads, flushes and closes the connections it owns, and
// writes the replies other threads queue for them (flush_later). Replies that a request completes for many
// connections at once (a barrier's release) are therefore written by every reactor at the same time.
class Reactor final : public FastPathConnectionOwner {
 public:
  explicit Reactor(FastPathServer::Impl* server) : server_(server) {}
  ~Reactor() override {
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  absl::Status open() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) {
      return absl::InternalError(absl::StrCat("[coordination] fast path: cannot create epoll/eventfd: ", std::strerror(errno)));
    }
    return watch(wake_fd_, kWakeId);
  }
  // Before start(): this reactor also accepts.
  absl::Status accept_from(int listener) { return watch(listener, kListenerId); }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  // Any thread. Asks the loop to end; join() waits for it.
  void stop() {
    stopping_.store(true);
    wake();
  }
  // After every reactor's stop(): waits for the loop (which closed every connection it owned), then closes what
  // was handed over and never adopted.
  void join() {
    if (thread_.joinable()) thread_.join();
    MutexLock lock(&mu_);
    for (int fd : to_adopt_) ::close(fd);
    to_adopt_.clear();
    to_flush_.clear();
  }

  // Any thread: `fd`, a connection just accepted, becomes this reactor's.
  void adopt(int fd) {
    if (is_current_thread()) return add(fd);
    bool first;
    {
      MutexLock lock(&mu_);
      first = to_adopt_.empty() && to_flush_.empty();
      to_adopt_.push_back(fd);
    }
    if (first) wake();
  }

  bool is_current_thread() const override { return current_reactor == this; }
  void count_sent(size_t bytes) override { server_->sent_bytes->add(static_cast<double>(bytes)); }
  void flush_later(std::shared_ptr<FastPathConnection> c) override {
    bool first;
    {
      MutexLock lock(&mu_);
      first = to_adopt_.empty() && to_flush_.empty();
      to_flush_.push_back(std::move(c));
    }
    if (first) wake();
  }

 private:
  absl::Status watch(int fd, uint64_t id) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(absl::StrCat("[coordination] fast path: epoll_ctl failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  void wake() {
    uint64_t one = 1;
    ssize_t w = ::write(wake_fd_, &one, sizeof one);
    (void)w;  // the counter only saturates after 2^64 - 2 wake-ups, each of which the loop reads
  }

  void run() {
    current_reactor = this;
    epoll_event events[256];
    while (!stopping_.load()) {
      int n = epoll_wait(epoll_fd_, events, 256, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        log_error("[coordination] fast path: epoll_wait failed: {}; the fast path stops", std::strerror(errno));
        break;
      }
      // The job-state changes of one batch of events (say, many connections of killed tasks closing) reach each
      // watcher as one update.
      CoordinationService::DeliveryBatch deliveries(server_->service);
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          take_handed_over();
          continue;
        }
        if (id == kListenerId) {
          server_->accept_all();
          continue;
        }
        auto it = connections_.find(id);
        if (it == connections_.end()) continue;  // closed earlier in this batch
        std::shared_ptr<FastPathConnection> c = it->second;
        const uint32_t ev = events[i].events;
        bool ok = true;
        if (ev & EPOLLOUT) ok = c->flush();
        if (ok && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
          ok = server_->read_and_serve(c, /*hung_up=*/(ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
        }
        if (!ok) close(c);
      }
    }
    for (auto& [id, c] : connections_) c->close(/*server_stopping=*/true);
    connections_.clear();
  }

  // The connections other threads handed over, and those with replies queued by other threads.
  void take_handed_over() {
    uint64_t count;
    ssize_t r = ::read(wake_fd_, &count, sizeof count);
    (void)r;  // EAGAIN: another wake-up's read took it
    std::vector<int> adopt;
    std::vector<std::shared_ptr<FastPathConnection>> flush;
    {
      MutexLock lock(&mu_);
      adopt.swap(to_adopt_);
      flush.swap(to_flush_);
    }
    for (int fd : adopt) add(fd);
    for (const auto& c : flush) {
      if (!c->flush()) close(c);
    }
  }

  void add(int fd) {
    const uint64_t id = server_->next_connection_id.fetch_add(1);
    auto c = std::make_shared<FastPathConnection>(fd, id, epoll_fd_, this);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      log_warn("[coordination] fast path: cannot watch a new connection: {}", std::strerror(errno));
      c->close(/*server_stopping=*/false);
      return;
    }
    connections_.emplace(id, std::move(c));
  }

  void close(const std::shared_ptr<FastPathConnection>& c) {
    c->close(/*server_stopping=*/false);
    connections_.erase(c->id());
  }

  FastPathServer::Impl* const server_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;  // never held while a connection's lock is taken
  std::vector<int> to_adopt_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<FastPathConnection>> to_flush_ ABSL_GUARDED_BY(mu_);
  // This reactor's thread only.
  std::map<uint64_t, std::shared_ptr<FastPathConnection>> connections_;
};

}  // namespace

void FastPathServer::Impl::accept_all() {
  while (true) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log_warn("[coordination] fast path: accept failed: {}", std::strerror(errno));
      }
      return;
    }
    set_socket_options(fd);
    reactors[next_reactor.fetch_add(1) % reactors.size()]->adopt(fd);
  }
}

void FastPathServer::Impl::stop() {
  for (auto& r : reactors) r->stop();
  for (auto& r : reactors) r->join();
}

int FastPathServer::default_reactor_threads(int num_tasks) {
  const int cores = allowed_cpu_count();
  const int wanted = (std::max(num_tasks, 1) + kTasksPerReactor - 1) / kTasksPerReactor;
  return std::clamp(wanted, 1, std::min(cores, kMaxDefaultReactorThreads));
}

absl::StatusOr<std::unique_ptr<FastPathServer>> FastPathServer::start(CoordinationService* service,
                                                                      const std::string& bind_address,
                                                                      std::function<void(int fd)> hand_off,
                                                                      std::shared_ptr<PeerRateLimiter> limiter,
                                                                      int reactor_threads) {
  if (reactor_threads < 1 || reactor_threads > kMaxReactorThreads) {
    return absl::InvalidArgumentError(absl::StrCat("[coordination] fast path: expected 1 to ", kMaxReactorThreads,
                                                   " reactor threads, found ", reactor_threads));
  }
  auto impl = std::make_unique<Impl>();
  impl->service = service;
  impl->hand_off = std::move(hand_off);
  impl->limiter = std::move(limiter);
  metrics::Family<metrics::Counter>& bytes = service->metrics_registry().counter(
      "mcx_coordinator_fast_path_bytes_total",
      "bytes of the processes' requests and the service's replies on the fast path, by direction (received, sent)",
      {"direction"});
  impl->received_bytes = &bytes.with({"received"});
  impl->sent_bytes = &bytes.with({"sent"});
  impl->rate_limited = &rate_limited_requests(*service).with({"fast_path"});
  MCX_ASSIGN_OR_RETURN(const ListeningSocket listening, listen_tcp(bind_address, 1024, "[coordination]"));
  impl->listener = listening.fd;
  impl->port = listening.port;
  for (int i = 0; i < reactor_threads; ++i) {
    auto r = std::make_unique<Reactor>(impl.get());
    MCX_RETURN_IF_ERROR(r->open());
    if (i == 0) MCX_RETURN_IF_ERROR(r->accept_from(impl->listener));
    impl->reactors.push_back(std::move(r));
  }
  for (auto& r : impl->reactors) r->start();
  return std::unique_ptr<FastPathServer>(new FastPathServer(std::move(impl)));
}

FastPathServer::FastPathServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FastPathServer::~FastPathServer() { shutdown(); }

int FastPathServer::port() const { return impl_->port; }

void FastPathServer::shutdown() {
  {
    MutexLock lock(&impl_->mu);
    if (impl_->shut) return;
    impl_->shut = true;
  }
  impl_->stop();
}

}  // namespace mcx::distributed
