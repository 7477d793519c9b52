#include "mcx/distributed/data_plane/tcp/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/collectives/live_set.h"
#include "mcx/core/logging.h"

namespace mcx::distributed {
namespace {

std::string format_address(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(s->sin6_port));
  }
  const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
  inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
  return absl::StrCat(host, ":", ntohs(s->sin_port));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataPlaneListener>> DataPlaneListener::start(Options options) {
  std::unique_ptr<DataPlaneListener> l(new DataPlaneListener(std::move(options)));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(l->options_.address.c_str(), "0", &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] cannot use '", l->options_.address,
                                                   "' as the data-plane address: ", gai_strerror(rc)));
  }
  std::string last = "no address";
  for (addrinfo* a = res; a != nullptr && l->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      l->listen_fd_ = fd;
    } else {
      last = strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (l->listen_fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("[data plane] cannot listen on ", l->options_.address, ": ", last));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(l->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  l->address_ = format_address(bound);
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return absl::InternalError(absl::StrCat("[data plane] eventfd: ", strerror(errno)));
  ignore_sigpipe_unless_handled();
  l->acceptor_ = std::thread([p = l.get()] { p->accept_loop(); });
  return l;
}

DataPlaneListener::~DataPlaneListener() {
  std::list<Handshake> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (Handshake& h : handshakes_) {
      if (!h.done && h.fd >= 0) ::shutdown(h.fd, SHUT_RDWR);
    }
  }
  arrived_.notify_all();
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.splice(all.end(), handshakes_);
  }
  for (Handshake& h : all) {
    if (h.thread.joinable()) h.thread.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void DataPlaneListener::reap_locked(std::list<Handshake>& finished) {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    auto next = std::next(it);
    if (it->done) finished.splice(finished.end(), handshakes_, it);
    it = next;
  }
}

void DataPlaneListener::accept_loop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int rc = poll(p, 2, 1000);
    std::list<Handshake> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      reap_locked(finished);
    }
    for (Handshake& h : finished) h.thread.join();
    if (rc <= 0 || !(p[0].revents & POLLIN)) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const std::string who = format_address(from);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(handshakes_.size()) >= options_.max_handshakes) {
      close(fd);
      refused_.fetch_add(1);
      log_warn("[data plane] refused a connection from {}: {} handshakes are in progress already", who,
               options_.max_handshakes);
      continue;
    }
    handshakes_.emplace_back();
    Handshake* h = &handshakes_.back();
    h->fd = fd;
    h->thread = std::thread([this, h, who] { run_handshake(h, who); });
  }
}

void DataPlaneListener::run_handshake(Handshake* h, std::string from) {
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;
  SSL* ssl = nullptr;
  absl::Status status;
  if (options_.tls) {
    absl::StatusOr<SSL*> s = options_.tls->new_ssl(h->fd, /*server=*/true);
    if (s.ok()) {
      ssl = *s;
    } else {
      status = s.status();
    }
  }
  auto stream = std::make_unique<DataPlaneStream>(h->fd, ssl);
  absl::StatusOr<DataPlaneHello> hello = absl::UnknownError("no hello read");
  if (status.ok()) status = stream->tls_handshake(deadline);
  ClaimCheck certificate_names_sender;
  if (options_.tls) {
    certificate_names_sender = [&](const DataPlaneHello& h) {
      return options_.tls->check_peer(stream->ssl(), static_cast<int>(h.from_process));
    };
  }
  if (status.ok()) {
    hello = acceptor_handshake(*stream, options_.process, certificate_names_sender, options_.secret, deadline);
    status = hello.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  h->done = true;
  if (!status.ok() || stopping_) {
    if (!stopping_) {
      refused_.fetch_add(1);
      log_warn("[data plane] refused a connection from {}: {}", from, std::string(status.message()));
    }
    h->fd = -1;
    return;  // the stream closes the socket
  }
  h->fd = -1;
  const absl::Time now = absl::Now();
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    it = now - it->second.at > kUnclaimedTtl ? arrivals_.erase(it) : std::next(it);
  }
  Arrival& a = arrivals_[{hello->group, static_cast<int>(hello->from_rank)}];
  a.stream = std::move(stream);
  a.from_process = static_cast<int>(hello->from_process);
  a.at = now;
  arrived_.notify_all();
}

absl::StatusOr<std::unique_ptr<DataPlaneStream>> DataPlaneListener::take(const std::string& group, int from_rank,
                                                                       int from_process, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::pair<std::string, int> key{group, from_rank};
  while (true) {
    if (stopping_) return absl::CancelledError("[data plane] the listener stopped");
    auto it = arrivals_.find(key);
    if (it != arrivals_.end()) {
      Arrival a = std::move(it->second);
      arrivals_.erase(it);
      if (a.from_process != from_process) {
        return absl::PermissionDeniedError(absl::StrCat("[data plane] rank ", from_rank, " of '", group,
                                                        "' connected as process ", a.from_process,
                                                        "; expected process ", from_process));
      }
      return std::move(a.stream);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("[data plane] process ", from_process, " (rank ", from_rank,
                                                      ") did not connect for '", group, "' in time"));
    }
    // A process the coordination service reported dead will never connect: stop waiting for it (checked at
    // each wake-up, at least every 200 ms), marked as its failure so that callers retry on the survivors.
    if (absl::Status dead = reported_process_failure({from_process}); !dead.ok()) return dead;
    arrived_.wait_until(lock, absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Milliseconds(200))));
  }
}

}  // namespace mcx::distributed
