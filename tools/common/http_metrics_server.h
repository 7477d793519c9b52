// A small HTTP/1.1 server with one endpoint, GET /metrics, answering the Prometheus text exposition format
// (mcx-coordinator --metrics-address; docs/profiling.md). One thread accepts and answers connections one at a
// time (a scrape every few seconds needs no more); each request has 5 s to arrive and may be 16 KiB at most, so a
// slow or hostile client cannot hold the endpoint. Other paths answer 404, other methods 405. Plaintext:
// bind it where only the monitoring system reaches (the default 127.0.0.1).
// Errors: start() fails as distributed::listen_tcp does (InvalidArgument for a malformed address, Unavailable
// naming one that cannot be bound).
// Thread-safety: render is called on the server's thread; the destructor stops and joins it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace mcx::tools {

class HttpMetricsServer {
 public:
  // bind: "HOST:PORT" (port 0 picks a free one; listen_socket.h says which hosts mean every interface).
  static absl::StatusOr<std::unique_ptr<HttpMetricsServer>> start(const std::string& bind,
                                                                  std::function<std::string()> render);
  ~HttpMetricsServer();
  HttpMetricsServer(const HttpMetricsServer&) = delete;
  HttpMetricsServer& operator=(const HttpMetricsServer&) = delete;

  int port() const { return port_; }

 private:
  HttpMetricsServer(int listen_fd, int wake_read, int wake_write, int port, std::function<std::string()> render);
  void serve();
  void answer(int fd);

  int listen_fd_, wake_read_, wake_write_, port_;
  std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace mcx::tools
