// One HTTPS GET with a deadline: what cluster detection needs to ask a Kubernetes API server about its Job
// (kubernetes_api.h). Not a general HTTP client: one request per connection ("Connection: close"), the body
// read whole (Content-Length, chunked or until the server closes), at most 16 MiB.
//
// The server is verified against the CA file given (no system trust store): its certificate must chain to it
// and name the host, as a DNS name (with SNI) or an IP address SAN when the host is an IP literal.
//
// Errors: InvalidArgument for a malformed request (empty host, port outside 1..65535, a path not starting with
// '/'); Unavailable when the host does not resolve, the connection is refused or drops, or TLS fails
// (certificate not trusted or not naming the host: OpenSSL's reason is in the message); DeadlineExceeded when
// the answer is not complete by the deadline; DataLoss for a response that is not HTTP/1.x or is larger than
// 16 MiB. A response with any status code is returned (the caller judges 403 or 404).
// Thread-safety: a free function; calls are independent.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx::distributed {

struct HttpsRequest {
  std::string host;  // DNS name or IP literal (IPv6 without brackets)
  int port = 443;
  std::string path;     // "/apis/batch/v1/..."
  std::string ca_file;  // PEM bundle the server's certificate must chain to
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. {"Authorization", "Bearer ..."}
  absl::Time deadline = absl::InfiniteFuture();
};

struct HttpsResponse {
  int status = 0;    // 200, 403, ...
  std::string body;  // de-chunked
};

absl::StatusOr<HttpsResponse> https_get(const HttpsRequest& request);

}  // namespace mcx::distributed
