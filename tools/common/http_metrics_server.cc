#include "tools/common/http_metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "mcx/distributed/rpc/listen_socket.h"

namespace mcx::tools {
namespace {

constexpr size_t kMaxRequestBytes = 16 * 1024;
constexpr int kRequestTimeoutMs = 5000;

void send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, kRequestTimeoutMs) <= 0) return;  // a client that does not read: give up on it
    } else {
      return;
    }
  }
}

std::string response(int code, const char* reason, const std::string& content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpMetricsServer>> HttpMetricsServer::start(const std::string& bind,
                                                                            std::function<std::string()> render) {
  absl::StatusOr<distributed::ListeningSocket> listening = distributed::listen_tcp(bind, 16, "[metrics]");
  if (!listening.ok()) return listening.status();
  const int fd = listening->fd, bound = listening->port;
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("[metrics] pipe: ", std::strerror(errno)));
  }
  return std::unique_ptr<HttpMetricsServer>(new HttpMetricsServer(fd, wake[0], wake[1], bound, std::move(render)));
}

HttpMetricsServer::HttpMetricsServer(int listen_fd, int wake_read, int wake_write, int port,
                                     std::function<std::string()> render)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { serve(); });
}

HttpMetricsServer::~HttpMetricsServer() {
  const char stop = 1;
  (void)!write(wake_write_, &stop, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void HttpMetricsServer::serve() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    answer(fd);
    close(fd);
  }
}

void HttpMetricsServer::answer(int fd) {
  std::string request;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  while (request.find("\r\n\r\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      return send_all(fd, response(431, "Request Header Fields Too Large", "text/plain", "request too large\n"));
    }
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return;  // too slow: dropped
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0) return;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return;
    }
    request.append(buf, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    return send_all(fd, response(400, "Bad Request", "text/plain", "expected a request line\n"));
  }
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (path != "/metrics") return send_all(fd, response(404, "Not Found", "text/plain", "the metrics are at /metrics\n"));
  if (method != "GET") return send_all(fd, response(405, "Method Not Allowed", "text/plain", "GET only\n"));
  send_all(fd, response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
}

}  // namespace mcx::tools
