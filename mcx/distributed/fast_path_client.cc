#include "mcx/distributed/fast_path_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/distributed/proto_convert.h"

namespace mcx::distributed {
namespace {

constexpr size_t kMaxIdleConnections = 8;
constexpr size_t kMaxPipelined = 1024;

int remaining_ms(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

struct Frame {
  FrameHeader header;
  std::string payload;
};

}  // namespace

struct FastPathClient::Connection {
  int fd = -1;
  std::string in;  // bytes read and not yet parsed

  ~Connection() {
    if (fd >= 0) ::close(fd);
  }

  // False on deadline; sets `error` (errno text) when the connection broke.
  bool wait(short events, absl::Time deadline, std::string* error) {
    while (true) {
      pollfd p{fd, events, 0};
      int r = ::poll(&p, 1, remaining_ms(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        *error = std::strerror(errno);
        return false;
      }
      return r > 0;
    }
  }

  // OK, DEADLINE_EXCEEDED (as kDeadlineExceeded with empty message) or UNAVAILABLE with the reason.
  absl::Status write_all(std::string_view data, absl::Time deadline) {
    while (!data.empty()) {
      ssize_t w = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        data.remove_prefix(static_cast<size_t>(w));
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return absl::UnavailableError(std::strerror(errno));
      std::string error;
      if (!wait(POLLOUT, deadline, &error)) {
        return error.empty() ? absl::DeadlineExceededError("") : absl::UnavailableError(error);
      }
    }
    return absl::OkStatus();
  }

  // The next frame. With `block` false, nullopt when no complete frame has arrived yet. Errors as write_all,
  // plus DATA_LOSS for a malformed stream.
  absl::StatusOr<std::optional<Frame>> read_frame(absl::Time deadline, bool block) {
    while (true) {
      if (in.size() >= kFastPathHeaderBytes) {
        absl::StatusOr<FrameHeader> h = decode_frame_header(in.data());
        if (!h.ok()) return h.status();
        if (in.size() - kFastPathHeaderBytes >= h->length) {
          Frame f{*h, in.substr(kFastPathHeaderBytes, h->length)};
          in.erase(0, kFastPathHeaderBytes + h->length);
          return std::optional<Frame>(std::move(f));
        }
      }
      char buf[65536];
      ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) {
        in.append(buf, static_cast<size_t>(r));
        continue;
      }
      if (r == 0) return absl::UnavailableError("the connection was closed");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return absl::UnavailableError(std::strerror(errno));
      if (!block) return std::optional<Frame>();
      std::string error;
      if (!wait(POLLIN, deadline, &error)) {
        return error.empty() ? absl::DeadlineExceededError("") : absl::UnavailableError(error);
      }
    }
  }
};

FastPathClient::FastPathClient(std::string host, int port, Incarnation service_incarnation)
    : host_(std::move(host)), port_(port), service_incarnation_(service_incarnation) {}

FastPathClient::~FastPathClient() = default;

absl::Status FastPathClient::unavailable(absl::string_view what) const {
  return absl::UnavailableError(
      absl::StrCat("[coordination] cannot reach the coordination service at ", host_, " (fast path port ", port_, "): ", what));
}

absl::Status FastPathClient::deadline_exceeded() const {
  return absl::DeadlineExceededError(absl::StrCat("[coordination] no reply from the coordination service at ", host_,
                                                  " (fast path port ", port_, ") before the call's deadline"));
}

absl::StatusOr<std::unique_ptr<FastPathClient::Connection>> FastPathClient::open(absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res); rc != 0) {
    return unavailable(absl::StrCat("cannot resolve the host: ", gai_strerror(rc)));
  }
  std::string last = "no address";
  auto c = std::make_unique<Connection>();
  for (addrinfo* a = res; a != nullptr && c->fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    c->fd = fd;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      std::string error;
      int so_error = errno;
      if (errno == EINPROGRESS) {
        if (!c->wait(POLLOUT, deadline, &error)) {
          so_error = error.empty() ? ETIMEDOUT : EIO;
        } else {
          socklen_t len = sizeof so_error;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        }
      }
      if (so_error != 0) {
        last = std::strerror(so_error);
        ::close(fd);
        c->fd = -1;
        continue;
      }
    }
  }
  freeaddrinfo(res);
  if (c->fd < 0) return unavailable(absl::StrCat("connect: ", last));
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string reply;
  if (absl::Status s = exchange(*c, FastOp::kHello, encode_u64(service_incarnation_), &reply, deadline); !s.ok()) {
    return s;
  }
  absl::StatusOr<uint64_t> theirs = decode_u64(reply);
  if (!theirs.ok()) return unavailable(theirs.status().message());
  if (*theirs != service_incarnation_) {
    // The coordinator this task registered with is gone; the agent rejoins the new one (UNAVAILABLE is retried).
    return unavailable(absl::StrCat("the fast path answers for coordination service incarnation ", *theirs,
                                    ", expected ", service_incarnation_, " (the coordinator restarted)"));
  }
  reached_.store(true);
  return c;
}

absl::Status FastPathClient::probe(absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<Connection>> c = open(absl::Now() + timeout);
  if (!c.ok()) return c.status();
  MutexLock lock(&mu_);
  idle_.push_back(std::move(*c));
  return absl::OkStatus();
}

absl::Status FastPathClient::exchange(Connection& c, FastOp op, std::string_view payload, std::string* reply,
                                      absl::Time deadline) {
  const uint64_t id = next_id_.fetch_add(1);
  absl::Status w = c.write_all(encode_frame(static_cast<uint16_t>(op), 0, id, payload), deadline);
  if (w.code() == absl::StatusCode::kDeadlineExceeded) return deadline_exceeded();
  if (!w.ok()) return unavailable(w.message());
  absl::StatusOr<std::optional<Frame>> f = c.read_frame(deadline, /*block=*/true);
  if (!f.ok()) {
    if (f.status().code() == absl::StatusCode::kDeadlineExceeded) return deadline_exceeded();
    return unavailable(f.status().message());
  }
  Frame& frame = **f;
  if (frame.header.id != id || frame.header.op != static_cast<uint16_t>(op)) {
    return unavailable(absl::StrCat("expected the reply to request ", id, " (op ", static_cast<int>(op),
                                    "), found request ", frame.header.id, " (op ", frame.header.op, ")"));
  }
  if (frame.header.flags & kFlagTransportError) {
    proto::StatusProto p;
    if (!p.ParseFromString(frame.payload)) return unavailable("a malformed error reply");
    return from_proto(p);
  }
  *reply = std::move(frame.payload);
  return absl::OkStatus();
}

absl::Status FastPathClient::call(FastOp op, const google::protobuf::MessageLite& request,
                                  google::protobuf::MessageLite* response, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (absl::Status s = flush(timeout); !s.ok()) return s;
  std::unique_ptr<Connection> c;
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) {
    absl::StatusOr<std::unique_ptr<Connection>> opened = open(deadline);
    if (!opened.ok()) return opened.status();
    c = std::move(*opened);
  }
  std::string reply;
  if (absl::Status s = exchange(*c, op, request.SerializeAsString(), &reply, deadline); !s.ok()) return s;
  if (!response->ParseFromString(reply)) {
    return unavailable(absl::StrCat("a malformed reply to op ", static_cast<int>(op), " (", reply.size(), " bytes)"));
  }
  MutexLock lock(&mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
  return absl::OkStatus();
}

void FastPathClient::set_pipe_error(absl::Status error) {
  if (pipe_error_.ok()) pipe_error_ = std::move(error);
}

void FastPathClient::lose_pipe(const absl::Status& why) {
  if (!pipe_pending_.empty()) {
    set_pipe_error(absl::Status(why.code(), absl::StrCat(why.message(), "; ", pipe_pending_.size(),
                                                         " pipelined kv insert(s) may not have been applied, the "
                                                         "first of key '", pipe_pending_.front().key, "'")));
  }
  pipe_pending_.clear();
  pipe_.reset();
}

absl::Status FastPathClient::take_pipe_error() {
  absl::Status e = std::move(pipe_error_);
  pipe_error_ = absl::OkStatus();
  pipe_unsettled_.store(pipe_pending_.size());
  return e;
}

void FastPathClient::read_acks(size_t keep, absl::Time deadline) {
  while (pipe_ && !pipe_pending_.empty()) {
    absl::StatusOr<std::optional<Frame>> f = pipe_->read_frame(deadline, /*block=*/pipe_pending_.size() > keep);
    if (!f.ok()) {
      lose_pipe(f.status().code() == absl::StatusCode::kDeadlineExceeded ? deadline_exceeded()
                                                                          : unavailable(f.status().message()));
      break;
    }
    if (!f->has_value()) break;
    Frame& frame = **f;
    Pending done = std::move(pipe_pending_.front());
    pipe_pending_.pop_front();
    absl::Status result;
    proto::StatusResponse r;
    if (frame.header.id != done.id) {
      result = unavailable(absl::StrCat("expected the acknowledgement of request ", done.id, ", found ", frame.header.id));
    } else if (frame.header.flags & kFlagTransportError) {
      proto::StatusProto p;
      result = p.ParseFromString(frame.payload) ? from_proto(p) : unavailable("a malformed error reply");
    } else if (!r.ParseFromString(frame.payload)) {
      result = unavailable("a malformed acknowledgement");
    } else {
      result = from_proto(r.status());
    }
    if (!result.ok()) {
      set_pipe_error(absl::Status(result.code(), absl::StrCat("[kv_set_async] the pipelined insert of key '", done.key,
                                                              "' failed: ", result.message())));
    }
  }
  pipe_unsettled_.store(pipe_pending_.size() + (pipe_error_.ok() ? 0 : 1));
}

absl::Status FastPathClient::insert_pipelined(const proto::KvInsertRequest& request, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&pipe_mu_);
  if (!pipe_error_.ok()) return take_pipe_error();
  if (!pipe_) {
    absl::StatusOr<std::unique_ptr<Connection>> opened = open(deadline);
    if (!opened.ok()) return opened.status();
    pipe_ = std::move(*opened);
  }
  const uint64_t id = next_id_.fetch_add(1);
  absl::Status w = pipe_->write_all(
      encode_frame(static_cast<uint16_t>(FastOp::kKvInsert), 0, id, request.SerializeAsString()), deadline);
  if (!w.ok()) {
    lose_pipe(w.code() == absl::StatusCode::kDeadlineExceeded ? deadline_exceeded() : unavailable(w.message()));
    set_pipe_error(absl::Status(w.code() == absl::StatusCode::kDeadlineExceeded ? absl::StatusCode::kDeadlineExceeded
                                                                                : absl::StatusCode::kUnavailable,
                                absl::StrCat("[kv_set_async] could not send the insert of key '", request.key(),
                                             "' to the coordination service at ", host_, " (fast path port ", port_,
                                             "): ", w.message().empty() ? "deadline" : w.message())));
    return take_pipe_error();
  }
  pipe_pending_.push_back({id, request.key()});
  read_acks(kMaxPipelined, deadline);
  return take_pipe_error();
}

absl::Status FastPathClient::flush(absl::Duration timeout) {
  if (pipe_unsettled_.load() == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&pipe_mu_);
  read_acks(0, deadline);
  return take_pipe_error();
}

}  // namespace mcx::distributed
