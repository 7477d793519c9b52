#include "mcx/distributed/rpc/listen_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/distributed/rpc/fast_path_wire.h"

namespace mcx::distributed {

absl::StatusOr<ListeningSocket> listen_tcp(const std::string& bind_address, int backlog, std::string_view who) {
  const std::string host = address_host(bind_address);
  int port = -1;
  if (size_t colon = bind_address.rfind(':'); colon != std::string::npos && !absl::SimpleAtoi(bind_address.substr(colon + 1), &port)) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(who), " expected a bind address host:port, found '", bind_address, "'"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const bool any = host.empty() || host == "::" || host == "0.0.0.0" || host == "*";
  if (int rc = getaddrinfo(any ? nullptr : host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat(std::string(who), " cannot listen on ", bind_address, ": ", gai_strerror(rc)));
  }
  ListeningSocket listening;
  std::string last_error = "no address";
  // Prefer IPv6 for the wildcard (dual-stack: it takes IPv4 connections too).
  for (int pass = 0; pass < 2 && listening.fd < 0; ++pass) {
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (any && (pass == 0) != (a->ai_family == AF_INET6)) continue;
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
        last_error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      listening.fd = fd;
      break;
    }
  }
  freeaddrinfo(res);
  if (listening.fd < 0) {
    return absl::UnavailableError(absl::StrCat(std::string(who), " cannot listen on ", bind_address, ": ", last_error));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(listening.fd, reinterpret_cast<sockaddr*>(&addr), &len);
  listening.port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return listening;
}

}  // namespace mcx::distributed
