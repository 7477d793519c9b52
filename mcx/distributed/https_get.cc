#include "mcx/distributed/https_get.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mcx::distributed {
namespace {

constexpr size_t kMaxResponse = size_t{16} << 20;

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? std::string("no OpenSSL error recorded") : out;
}

int remaining_ms(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Waits for events on fd; false when the deadline passed first.
bool wait_for(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

absl::StatusOr<std::unique_ptr<Socket>> connect_tcp(const HttpsRequest& r, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(r.host.c_str(), std::to_string(r.port).c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat(where, ": cannot resolve the host: ", gai_strerror(rc)));
  }
  std::string last = "no address";
  std::unique_ptr<Socket> connected;
  bool timed_out = false;
  for (addrinfo* a = res; a != nullptr && !connected && !timed_out; a = a->ai_next) {
    auto s = std::make_unique<Socket>(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (s->fd() < 0) {
      last = std::strerror(errno);
      continue;
    }
    int error = 0;
    if (::connect(s->fd(), a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        if (!wait_for(s->fd(), POLLOUT, r.deadline)) {
          timed_out = true;
          break;
        }
        socklen_t len = sizeof error;
        getsockopt(s->fd(), SOL_SOCKET, SO_ERROR, &error, &len);
      }
    }
    if (error != 0) {
      last = std::strerror(error);
      continue;
    }
    connected = std::move(s);
  }
  freeaddrinfo(res);
  if (timed_out) return absl::DeadlineExceededError(absl::StrCat(where, ": no connection before the deadline"));
  if (!connected) return absl::UnavailableError(absl::StrCat(where, ": connect: ", last));
  return connected;
}

// Runs an SSL operation on a non-blocking socket until it completes, the peer closes (0) or the deadline passes.
template <typename Op>
absl::StatusOr<int> drive(SSL* ssl, int fd, absl::Time deadline, const std::string& where, const char* what, Op op) {
  while (true) {
    ERR_clear_error();
    const int r = op();
    if (r > 0) return r;
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (!wait_for(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
        return absl::DeadlineExceededError(absl::StrCat(where, ": ", what, " not done before the deadline"));
      }
      continue;
    }
    if (e == SSL_ERROR_SYSCALL && r == 0) return 0;  // closed without close_notify
    std::string reason = e == SSL_ERROR_SYSCALL ? std::string(std::strerror(errno)) : openssl_errors();
    if (const long verify = SSL_get_verify_result(ssl); verify != X509_V_OK) {
      absl::StrAppend(&reason, " (certificate: ", X509_verify_cert_error_string(verify), ")");
    }
    return absl::UnavailableError(absl::StrCat(where, ": ", what, " failed: ", reason));
  }
}

bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Decodes a chunked body; nullopt while incomplete.
absl::StatusOr<std::optional<std::string>> dechunk(absl::string_view in, const std::string& where) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == absl::string_view::npos) return std::optional<std::string>();
    absl::string_view size_text = in.substr(pos, eol - pos);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
    size_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size) || size > kMaxResponse) {
      return absl::DataLossError(absl::StrCat(where, ": malformed chunk size '", std::string(size_text), "'"));
    }
    pos = eol + 2;
    if (size == 0) return std::optional<std::string>(std::move(out));  // trailers are ignored
    if (in.size() < pos + size + 2) return std::optional<std::string>();
    out.append(in.data() + pos, size);
    pos += size + 2;
  }
}

// Parses a response read so far; nullopt while incomplete (close_seen: the server has closed, so a body without
// a length ends here).
absl::StatusOr<std::optional<HttpsResponse>> parse_response(const std::string& raw, bool close_seen,
                                                            const std::string& where) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    if (close_seen) return absl::DataLossError(absl::StrCat(where, ": the connection closed before a complete answer"));
    return std::optional<HttpsResponse>();
  }
  absl::string_view head(raw.data(), head_end);
  const size_t line_end = head.find("\r\n");
  absl::string_view status_line = head.substr(0, line_end);
  HttpsResponse response;
  if (!absl::StartsWith(status_line, "HTTP/1.") || status_line.size() < 12 ||
      !absl::SimpleAtoi(status_line.substr(9, 3), &response.status)) {
    return absl::DataLossError(
        absl::StrCat(where, ": expected an HTTP/1.x status line, found '", std::string(status_line.substr(0, 80)), "'"));
  }
  std::optional<size_t> content_length;
  bool chunked = false;
  size_t pos = line_end == absl::string_view::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == absl::string_view::npos) next = head.size();
    absl::string_view line = head.substr(pos, next - pos);
    pos = next + 2;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(std::string(line.substr(0, colon)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (name == "content-length") {
      size_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return absl::DataLossError(absl::StrCat(where, ": malformed Content-Length '", value, "'"));
      }
      content_length = n;
    } else if (name == "transfer-encoding") {
      chunked = absl::StrContains(absl::AsciiStrToLower(value), "chunked");
    }
  }
  absl::string_view body(raw.data() + head_end + 4, raw.size() - head_end - 4);
  if (chunked) {
    auto decoded = dechunk(body, where);
    if (!decoded.ok()) return decoded.status();
    if (!decoded->has_value()) {
      if (close_seen) return absl::DataLossError(absl::StrCat(where, ": the connection closed inside a chunked body"));
      return std::optional<HttpsResponse>();
    }
    response.body = std::move(**decoded);
  } else if (content_length) {
    if (body.size() < *content_length) {
      if (close_seen) {
        return absl::DataLossError(absl::StrCat(where, ": the connection closed after ", body.size(), " of ",
                                                *content_length, " body bytes"));
      }
      return std::optional<HttpsResponse>();
    }
    response.body = std::string(body.substr(0, *content_length));
  } else {
    if (!close_seen) return std::optional<HttpsResponse>();
    response.body = std::string(body);
  }
  return std::optional<HttpsResponse>(std::move(response));
}

}  // namespace

absl::StatusOr<HttpsResponse> https_get(const HttpsRequest& r) {
  const std::string where = absl::StrCat("[https] GET https://", r.host, ":", r.port, r.path);
  if (r.host.empty() || r.port < 1 || r.port > 65535 || r.path.empty() || r.path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected a host, a port in 1..65535 and a path starting "
                                                   "with '/'"));
  }
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return absl::InternalError(absl::StrCat(where, ": SSL_CTX_new: ", openssl_errors()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx.get(), r.ca_file.c_str(), nullptr) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": cannot load the CA file '", r.ca_file, "': ", openssl_errors()));
  }
  absl::StatusOr<std::unique_ptr<Socket>> socket = connect_tcp(r, where);
  if (!socket.ok()) return socket.status();
  const int fd = (*socket)->fd();
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return absl::InternalError(absl::StrCat(where, ": ", openssl_errors()));
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (is_ip_literal(r.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, r.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), r.host.c_str());
    X509_VERIFY_PARAM_set1_host(param, r.host.c_str(), r.host.size());
  }
  absl::StatusOr<int> done = drive(ssl.get(), fd, r.deadline, where, "TLS handshake", [&] { return SSL_connect(ssl.get()); });
  if (!done.ok()) return done.status();
  if (*done == 0) return absl::UnavailableError(absl::StrCat(where, ": the server closed during the TLS handshake"));

  const std::string host_header = r.host.find(':') != std::string::npos ? absl::StrCat("[", r.host, "]") : r.host;
  std::string request = absl::StrCat("GET ", r.path, " HTTP/1.1\r\nHost: ", host_header, "\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&request, name, ": ", value, "\r\n");
  absl::StrAppend(&request, "Connection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    absl::StatusOr<int> n = drive(ssl.get(), fd, r.deadline, where, "sending the request", [&] {
      return SSL_write(ssl.get(), request.data() + sent, static_cast<int>(request.size() - sent));
    });
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::UnavailableError(absl::StrCat(where, ": the server closed before the request was sent"));
    sent += static_cast<size_t>(*n);
  }
  std::string raw;
  char buf[16384];
  while (true) {
    absl::StatusOr<int> n =
        drive(ssl.get(), fd, r.deadline, where, "reading the answer", [&] { return SSL_read(ssl.get(), buf, sizeof buf); });
    if (!n.ok()) return n.status();
    raw.append(buf, static_cast<size_t>(*n));
    if (raw.size() > kMaxResponse) {
      return absl::DataLossError(absl::StrCat(where, ": the answer is larger than ", kMaxResponse, " bytes"));
    }
    absl::StatusOr<std::optional<HttpsResponse>> parsed = parse_response(raw, *n == 0, where);
    if (!parsed.ok()) return parsed.status();
    if (parsed->has_value()) return std::move(**parsed);
  }
}

}  // namespace mcx::distributed
