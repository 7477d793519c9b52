#include "mcx/distributed/rpc/fast_path_channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

constexpr size_t kMaxIdleConnections = 8;
constexpr size_t kMaxPipelined = 1024;
constexpr size_t kAckReadInterval = 64;

int remaining_ms(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// The calls that must see this process's pipelined inserts applied (and report their errors): the store's and
// the agreements'. Heartbeats, registration, errors, shutdown and status are not held up by them, and never
// report an insert's error in their place.
bool ordered_after_pipelined_inserts(Rpc rpc) {
  switch (rpc) {
    case Rpc::kKvInsert:
    case Rpc::kKvGet:
    case Rpc::kKvIncrement:
    case Rpc::kKvDir:
    case Rpc::kKvDelete:
    case Rpc::kBarrier:
    case Rpc::kCancelBarrier:
    case Rpc::kLiveTasks:
      return true;
    default:
      return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------- FastPathConnection

absl::Status FastPathConnection::unavailable(absl::string_view what) const {
  return absl::UnavailableError(
      absl::StrCat("[coordination] cannot reach the coordination service at ", address_, ": ", what));
}

absl::Status FastPathConnection::deadline_exceeded() const {
  return absl::DeadlineExceededError(
      absl::StrCat("[coordination] no answer from the coordination service at ", address_, " before the deadline"));
}

absl::StatusOr<std::unique_ptr<FastPathConnection>> FastPathConnection::open(const std::string& address,
                                                                             absl::Time deadline) {
  const std::string host = address_host(address);
  const size_t colon = address.rfind(':');
  int port = 0;
  if (host.empty() || colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("[coordination] expected the coordinator address as host:port, found '", address, "'"));
  }
  auto fail = [&](absl::string_view what) {
    return absl::UnavailableError(
        absl::StrCat("[coordination] cannot reach the coordination service at ", address, ": ", what));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return fail(absl::StrCat("cannot resolve the host: ", gai_strerror(rc)));
  }
  std::string last = "no address";
  std::unique_ptr<FastPathConnection> c;
  for (addrinfo* a = res; a != nullptr && !c; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    std::unique_ptr<FastPathConnection> candidate(new FastPathConnection(fd, address));
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      int so_error = errno;
      if (errno == EINPROGRESS) {
        std::string error;
        if (!candidate->wait(POLLOUT, deadline, &error)) {
          so_error = error.empty() ? ETIMEDOUT : EIO;
        } else {
          socklen_t len = sizeof so_error;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        }
      }
      if (so_error != 0) {
        last = std::strerror(so_error);
        continue;
      }
    }
    c = std::move(candidate);
  }
  freeaddrinfo(res);
  if (!c) return fail(absl::StrCat("connect: ", last));
  set_socket_options(c->fd_);
  absl::StatusOr<std::string> hello = c->exchange(kHelloOp, 0, "", deadline);
  if (hello.status().code() == absl::StatusCode::kDataLoss) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[coordination] the coordination service at ", address,
        " does not speak mcx's fast path (a coordinator started with MCX_COORDINATION_FAST_PATH=0 or with mTLS): "
        "give the processes the same MCX_COORDINATION_FAST_PATH and mTLS settings (",
        hello.status().message(), ")"));
  }
  if (!hello.ok()) return hello.status();
  return c;
}

FastPathConnection::~FastPathConnection() { ::close(fd_); }

void FastPathConnection::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

bool FastPathConnection::wait(short events, absl::Time deadline, std::string* error) {
  while (true) {
    pollfd p{fd_, events, 0};
    int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *error = std::strerror(errno);
      return false;
    }
    return r > 0;
  }
}

absl::Status FastPathConnection::write_frame(uint16_t op, uint64_t id, std::string_view payload, absl::Time deadline) {
  return write_encoded(encode_frame(op, 0, id, payload), deadline);
}

absl::Status FastPathConnection::write_frame(uint16_t op, uint64_t id, const google::protobuf::MessageLite& message,
                                             absl::Time deadline) {
  return write_encoded(encode_frame(op, 0, id, message), deadline);
}

absl::Status FastPathConnection::write_encoded(const std::string& frame, absl::Time deadline) {
  std::string_view data = frame;
  while (!data.empty()) {
    ssize_t w = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data.remove_prefix(static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return unavailable(std::strerror(errno));
    std::string error;
    if (!wait(POLLOUT, deadline, &error)) return error.empty() ? deadline_exceeded() : unavailable(error);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Frame>> FastPathConnection::read_frame(absl::Time deadline, bool block) {
  while (true) {
    if (in_.size() >= kFastPathHeaderBytes) {
      absl::StatusOr<FrameHeader> h = decode_frame_header(in_.data());
      if (!h.ok()) return h.status();  // DATA_LOSS: not a fast-path peer, or a broken stream
      if (in_.size() - kFastPathHeaderBytes >= h->length) {
        Frame f{*h, in_.substr(kFastPathHeaderBytes, h->length)};
        in_.erase(0, kFastPathHeaderBytes + h->length);
        return std::optional<Frame>(std::move(f));
      }
    }
    // A blocking read waits first (the reply is rarely there already): poll + recv, not recv + poll + recv.
    if (block) {
      std::string error;
      if (!wait(POLLIN, deadline, &error)) return error.empty() ? deadline_exceeded() : unavailable(error);
    }
    char buf[65536];
    ssize_t r = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) {
      in_.append(buf, static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return unavailable("the connection was closed");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!block && errno != EINTR) return std::optional<Frame>();
      continue;
    }
    return unavailable(std::strerror(errno));
  }
}

absl::StatusOr<std::string> FastPathConnection::exchange(uint16_t op, uint64_t id, std::string_view payload,
                                                         absl::Time deadline) {
  MCX_RETURN_IF_ERROR(write_frame(op, id, payload, deadline));
  return read_reply(op, id, deadline);
}

absl::StatusOr<std::string> FastPathConnection::exchange(uint16_t op, uint64_t id,
                                                         const google::protobuf::MessageLite& request,
                                                         absl::Time deadline) {
  MCX_RETURN_IF_ERROR(write_frame(op, id, request, deadline));
  return read_reply(op, id, deadline);
}

absl::StatusOr<std::string> FastPathConnection::read_reply(uint16_t op, uint64_t id, absl::Time deadline) {
  absl::StatusOr<std::optional<Frame>> f = read_frame(deadline, /*block=*/true);
  if (!f.ok()) return f.status();
  Frame& frame = **f;
  if (frame.header.id != id || frame.header.op != op) {
    return unavailable(absl::StrCat("expected the reply to request ", id, " (op ", op, "), found request ",
                                    frame.header.id, " (op ", frame.header.op, ")"));
  }
  if (frame.header.flags & kFlagTransportError) {
    proto::StatusProto p;
    if (!p.ParseFromString(frame.payload)) return unavailable("a malformed error reply");
    return from_proto(p);
  }
  return std::move(frame.payload);
}

// ------------------------------------------------------------------------------------------- FastPathChannel

FastPathChannel::~FastPathChannel() = default;

absl::Status FastPathChannel::call(Rpc rpc, const google::protobuf::MessageLite& request,
                                   google::protobuf::MessageLite* response, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (ordered_after_pipelined_inserts(rpc)) {
    if (absl::Status s = flush(timeout); !s.ok()) return s;
  }
  std::unique_ptr<FastPathConnection> c;
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) {
    absl::StatusOr<std::unique_ptr<FastPathConnection>> opened = FastPathConnection::open(address_, deadline);
    if (!opened.ok()) return opened.status();
    c = std::move(*opened);
  }
  absl::StatusOr<std::string> reply = c->exchange(static_cast<uint16_t>(rpc), next_id(), request, deadline);
  if (!reply.ok()) return reply.status();
  if (!response->ParseFromString(*reply)) {
    return absl::UnavailableError(absl::StrCat("[coordination] a malformed reply from the coordination service at ",
                                               address_, " to call ", static_cast<int>(rpc), " (", reply->size(),
                                               " bytes)"));
  }
  MutexLock lock(&mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
  return absl::OkStatus();
}

void FastPathChannel::set_pipe_error(absl::Status error) {
  if (pipe_error_.ok()) pipe_error_ = std::move(error);
}

void FastPathChannel::lose_pipe(const absl::Status& why) {
  if (!pipe_pending_.empty()) {
    set_pipe_error(absl::Status(why.code(), absl::StrCat(why.message(), "; ", pipe_pending_.size(),
                                                         " pipelined kv insert(s) may not have been applied, the "
                                                         "first of key '", pipe_pending_.front().key, "'")));
  }
  pipe_pending_.clear();
  pipe_.reset();
}

absl::Status FastPathChannel::take_pipe_error() {
  absl::Status e = std::move(pipe_error_);
  pipe_error_ = absl::OkStatus();
  pipe_unsettled_.store(pipe_pending_.size());
  return e;
}

void FastPathChannel::read_acks(size_t keep, absl::Time deadline) {
  while (pipe_ && !pipe_pending_.empty()) {
    absl::StatusOr<std::optional<Frame>> f = pipe_->read_frame(deadline, /*block=*/pipe_pending_.size() > keep);
    if (!f.ok()) {
      lose_pipe(f.status());
      break;
    }
    if (!f->has_value()) break;
    Frame& frame = **f;
    Pending done = std::move(pipe_pending_.front());
    pipe_pending_.pop_front();
    absl::Status result;
    proto::StatusResponse r;
    if (frame.header.id != done.id) {
      result = absl::UnavailableError(absl::StrCat("[coordination] the coordination service at ", address_,
                                                   " acknowledged request ", frame.header.id, ", expected ", done.id));
    } else if (frame.header.flags & kFlagTransportError) {
      proto::StatusProto p;
      result = p.ParseFromString(frame.payload) ? from_proto(p) : absl::UnavailableError("a malformed error reply");
    } else if (!r.ParseFromString(frame.payload)) {
      result = absl::UnavailableError("a malformed acknowledgement");
    } else {
      result = from_proto(r.status());
    }
    if (!result.ok()) {
      set_pipe_error(absl::Status(result.code(), absl::StrCat("[kv_insert_async] the pipelined insert of key '", done.key,
                                                              "' failed: ", result.message())));
    }
  }
  pipe_unsettled_.store(pipe_pending_.size() + (pipe_error_.ok() ? 0 : 1));
}

absl::Status FastPathChannel::insert_pipelined(const proto::KvInsertRequest& request, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&pipe_mu_);
  if (!pipe_error_.ok()) return take_pipe_error();
  if (!pipe_) {
    absl::StatusOr<std::unique_ptr<FastPathConnection>> opened = FastPathConnection::open(address_, deadline);
    if (!opened.ok()) return opened.status();
    pipe_ = std::move(*opened);
  }
  const uint64_t id = next_id();
  absl::Status w = pipe_->write_frame(static_cast<uint16_t>(Rpc::kKvInsert), id, request, deadline);
  if (!w.ok()) {
    lose_pipe(w);
    set_pipe_error(absl::Status(w.code(), absl::StrCat("[kv_insert_async] could not send the insert of key '",
                                                       request.key(), "': ", w.message())));
    return take_pipe_error();
  }
  pipe_pending_.push_back({id, request.key()});
  // Collect the acknowledgements that have arrived every so often (not after every insert: one syscall less
  // per insert), and wait when too many are outstanding.
  if (pipe_pending_.size() % kAckReadInterval == 0 || pipe_pending_.size() > kMaxPipelined) {
    read_acks(kMaxPipelined, deadline);
  }
  return take_pipe_error();
}

absl::Status FastPathChannel::flush(absl::Duration timeout) {
  if (pipe_unsettled_.load() == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&pipe_mu_);
  read_acks(0, deadline);
  return take_pipe_error();
}

}  // namespace mcx::distributed
