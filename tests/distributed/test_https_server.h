// A real HTTPS server for tests of https_get and the Kubernetes API client: TLS on 127.0.0.1 with a certificate
// from test_certs.h, one request per connection, answered by a handler the test gives (raw HTTP response bytes:
// the test chooses Content-Length, chunked or close-delimited bodies). A handler returning nullopt makes the
// server hold the connection without answering (for deadline tests) until it stops.
#pragma once

#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mcx::distributed {

class TestHttpsServer {
 public:
  // request: the raw request head ("GET /path HTTP/1.1\r\n...\r\n\r\n"); returns the raw response.
  using Handler = std::function<std::optional<std::string>(const std::string& request)>;

  TestHttpsServer(const std::string& cert_file, const std::string& key_file, Handler handler)
      : handler_(std::move(handler)) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate_chain_file(ctx_, cert_file.c_str());
    SSL_CTX_use_PrivateKey_file(ctx_, key_file.c_str(), SSL_FILETYPE_PEM);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~TestHttpsServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
    SSL_CTX_free(ctx_);
  }

  int port() const { return port_; }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  bool wait(int fd) const {
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) return true;
    }
    return false;
  }

  void serve() {
    while (wait(listen_fd_)) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      SSL* ssl = SSL_new(ctx_);
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) == 1) {
        std::string request;
        char buf[4096];
        while (request.find("\r\n\r\n") == std::string::npos) {
          const int n = SSL_read(ssl, buf, sizeof buf);
          if (n <= 0) break;
          request.append(buf, static_cast<size_t>(n));
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(request);
        }
        if (std::optional<std::string> response = handler_(request)) {
          SSL_write(ssl, response->data(), static_cast<int>(response->size()));
          SSL_shutdown(ssl);
        } else {
          while (wait(fd)) {
            if (SSL_read(ssl, buf, sizeof buf) <= 0) break;
          }
        }
      }
      SSL_free(ssl);
      ::close(fd);
    }
  }

  Handler handler_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
  std::thread thread_;
};

// An HTTP/1.1 response with a Content-Length body.
inline std::string http_response(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace mcx::distributed
