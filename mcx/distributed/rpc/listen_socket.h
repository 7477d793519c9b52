// A listening TCP socket on "HOST:PORT", as the coordination service's fast path and the coordinator's metrics
// endpoint open it: port 0 takes any free port; an empty host, "*", "0.0.0.0" or "::" listens on every
// interface (IPv6 first, whose socket takes IPv4 too); "[v6 address]:port" is accepted. The socket is
// non-blocking, close-on-exec, with SO_REUSEADDR.
// Errors (prefixed with `who`, e.g. "[coordination]"): InvalidArgument for an address that is not host:port;
// Unavailable naming the address when it cannot be resolved or bound.
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mcx::distributed {

struct ListeningSocket {
  int fd = -1;
  int port = 0;  // the port bound (the one picked when 0 was asked)
};

absl::StatusOr<ListeningSocket> listen_tcp(const std::string& bind_address, int backlog, std::string_view who);

}  // namespace mcx::distributed
