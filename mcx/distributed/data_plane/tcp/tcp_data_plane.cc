#include "mcx/distributed/data_plane/tcp/tcp_data_plane.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/collectives/live_set.h"
#include "mcx/distributed/data_plane/tcp/shared_memory_link.h"
#include "mcx/distributed/data_plane/tcp/tcp_peer_group.h"

namespace mcx::distributed {
namespace {

absl::Duration left_until(absl::Time deadline) { return std::max(absl::Milliseconds(1), deadline - absl::Now()); }

// "host:port" or "[v6]:port" -> (host, port).
std::pair<std::string, std::string> split_address(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close != std::string::npos && close + 1 < address.size() && address[close + 1] == ':') {
      return {address.substr(1, close - 1), address.substr(close + 2)};
    }
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {address, ""};
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// A TCP connection to address by the deadline; Unavailable (refused, unreachable) is retryable for the caller.
absl::StatusOr<int> dial(const std::string& address, absl::Time deadline) {
  auto [host, port] = split_address(address);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("[data plane] the published address '", address, "' is not host:port: ", gai_strerror(rc)));
  }
  std::string last = "no address";
  int out = -1;
  for (addrinfo* a = res; a != nullptr && out < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()), 1, 10000));
      int err = ETIMEDOUT;
      if (poll(&p, 1, ms) == 1) {
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      out = fd;
    } else {
      last = strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (out < 0) return absl::UnavailableError(absl::StrCat("[data plane] cannot connect to ", address, ": ", last));
  const int one = 1;
  setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return out;
}

}  // namespace

std::string TcpDataPlane::address_key(int process) { return task_key(process, "data_plane/address"); }

absl::StatusOr<std::shared_ptr<TcpDataPlane>> TcpDataPlane::start(Options options) {
  if (options.kv == nullptr) return absl::InvalidArgumentError("[data plane] TcpDataPlane needs the job's key-value store");
  std::shared_ptr<TcpDataPlane> dp(new TcpDataPlane(std::move(options)));
  std::shared_ptr<JobKeyValue> kv = dp->options_.kv;
  DataPlaneListener::Options lo;
  lo.address = dp->options_.address;
  lo.process = dp->options_.process;
  lo.tls = dp->options_.tls;
  lo.secret = [kv](absl::Time deadline) { return kv->get(kDataPlaneSecretKey, left_until(deadline)); };
  MCX_ASSIGN_OR_RETURN(dp->listener_, DataPlaneListener::start(std::move(lo)));
  // A restarted process publishes its new address over the old one (its own key: overwrite allowed).
  MCX_RETURN_IF_ERROR(kv->insert(address_key(dp->options_.process), dp->listener_->address(), /*allow_overwrite=*/true).status());
  return dp;
}

absl::StatusOr<std::unique_ptr<DataPlaneStream>> TcpDataPlane::handshake_with(const std::string& address,
                                                                             const DataPlaneHello& hello,
                                                                             const std::string& secret,
                                                                             absl::Time deadline) {
  MCX_ASSIGN_OR_RETURN(int fd, dial(address, deadline));
  SSL* ssl = nullptr;
  if (options_.tls) {
    absl::StatusOr<SSL*> s = options_.tls->new_ssl(fd, /*server=*/false);
    if (!s.ok()) {
      close(fd);
      return s.status();
    }
    ssl = *s;
  }
  auto stream = std::make_unique<DataPlaneStream>(fd, ssl);
  MCX_RETURN_IF_ERROR(stream->tls_handshake(deadline));
  if (options_.tls) MCX_RETURN_IF_ERROR(options_.tls->check_peer(stream->ssl(), static_cast<int>(hello.to_process)));
  absl::Status handshake = connector_handshake(*stream, hello, secret, deadline);
  if (handshake.code() == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(absl::StrCat(
        "[data plane] process ", hello.to_process, " at ", address,
        " closed the connection during the handshake (it exited, or refused this process's hello or certificate; "
        "its log says why): ", handshake.message()));
  }
  MCX_RETURN_IF_ERROR(handshake);
  return stream;
}

absl::StatusOr<std::unique_ptr<DataPlaneStream>> TcpDataPlane::connect_to(const std::string& group, int my_rank,
                                                                         int peer_rank, int peer_process,
                                                                         const std::string& secret,
                                                                         absl::Time deadline) {
  DataPlaneHello hello;
  hello.from_process = static_cast<uint32_t>(options_.process);
  hello.from_rank = static_cast<uint32_t>(my_rank);
  hello.to_process = static_cast<uint32_t>(peer_process);
  hello.to_rank = static_cast<uint32_t>(peer_rank);
  hello.group = group;
  absl::Status last;       // the last attempt's error
  absl::Status refusal;    // the last error of an attempt that reached a listener (says more than a timeout)
  std::string last_address;
  absl::Duration backoff = absl::Milliseconds(10);
  while (absl::Now() < deadline) {
    MCX_ASSIGN_OR_RETURN(std::string address,
                         options_.kv->get(address_key(peer_process), left_until(deadline)));
    // A refusal by the listener now published is final; one from an address the process has since replaced (it
    // restarted, and its old port may serve someone else now) is retried at the new address.
    if (last.code() == absl::StatusCode::kPermissionDenied && address == last_address) return last;
    hello.nonce = random_32_bytes();
    absl::StatusOr<std::unique_ptr<DataPlaneStream>> stream = handshake_with(address, hello, secret, deadline);
    if (stream.ok()) return stream;
    last = stream.status();
    last_address = address;
    if (!absl::StartsWith(last.message(), "[data plane] cannot connect to ")) refusal = last;
    if (last.code() == absl::StatusCode::kPermissionDenied) continue;
    // Not listening any more because the coordination service reported it dead: it will not come back.
    if (absl::Status dead = reported_process_failure({peer_process}); !dead.ok()) return dead;
    absl::SleepFor(std::min(backoff, left_until(deadline)));  // not listening (yet, or any more): restarting?
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
  const absl::Status& why = refusal.ok() ? last : refusal;
  return absl::DeadlineExceededError(absl::StrCat("[data plane] could not connect to process ", peer_process,
                                                  " in time", why.ok() ? "" : ": ", why.message()));
}

absl::StatusOr<std::unique_ptr<PeerGroup>> TcpDataPlane::connect(const PeerGroupRequest& request) {
  const int self = options_.process;
  auto it = std::find(request.processes.begin(), request.processes.end(), self);
  if (it == request.processes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] process ", self, " is not in the group {",
                                                   absl::StrJoin(request.processes, ","), "}"));
  }
  const int rank = static_cast<int>(it - request.processes.begin());
  const int size = static_cast<int>(request.processes.size());
  const std::string group = absl::StrCat(request.key, "|", request.live_set, ".", request.generation);
  if (group.size() + 64 > kMaxHelloBytes) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] the group key is ", request.key.size(),
                                                   " bytes; expected at most ", kMaxHelloBytes - 128));
  }
  auto context = [&](const absl::Status& s) {  // (keeps a process-failure mark)
    return with_message(s, absl::StrCat("[data plane] process ", self, " could not connect '", request.key,
                                               "' with processes {", absl::StrJoin(request.processes, ","),
                                               "} (live set ", request.live_set, ", generation ", request.generation,
                                               "): ", s.message()));
  };
  std::vector<std::unique_ptr<DataPlaneStream>> streams(size);
  if (size > 1) {
    absl::StatusOr<std::string> secret = options_.kv->get(kDataPlaneSecretKey, left_until(request.deadline));
    if (!secret.ok()) return context(secret.status());
    for (int q = 0; q < rank; ++q) {
      auto s = connect_to(group, rank, q, request.processes[q], *secret, request.deadline);
      if (!s.ok()) return context(s.status());
      if (absl::Status shm = offer_shared_memory(**s, options_.host, request.deadline); !shm.ok()) {
        return context(with_message(shm, absl::StrCat("[data plane] with process ", request.processes[q], ": ",
                                                      shm.message())));
      }
      streams[q] = std::move(*s);
    }
    for (int q = rank + 1; q < size; ++q) {
      auto s = listener_->take(group, q, request.processes[q], request.deadline);
      if (!s.ok()) return context(s.status());
      if (absl::Status shm = answer_shared_memory(**s, options_.host, request.deadline); !shm.ok()) {
        return context(with_message(shm, absl::StrCat("[data plane] with process ", request.processes[q], ": ",
                                                      shm.message())));
      }
      streams[q] = std::move(*s);
    }
  }
  return make_tcp_peer_group(std::move(streams), request.processes, rank, request.key, options_.tls != nullptr);
}

}  // namespace mcx::distributed
