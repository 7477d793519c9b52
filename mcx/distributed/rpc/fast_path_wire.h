// The fast path's wire format (fast_path_server.h, fast_path_client.h): length-prefixed frames over one TCP
// connection, each a 24-byte header and a payload, all integers little-endian:
//
//   magic u32 = kFastPathMagic ("MCF1": protocol version 1) | payload length u32 | op u16 | flags u16 | reserved u32 |
//   request id u64 | payload (a serialized coordination.proto request or response, or a hello)
//
// A request's op is an Rpc (rpc/handlers.h), its payload the request message; the response carries the op
// and request id of its request and the response message. The watch request (Rpc::kWatch) is answered with
// one frame per job state, all with its id, until the connection closes. With kFlagTransportError the payload
// is a StatusProto: the server could not run the request (unknown op, malformed payload, a watch refused); the
// connection stays usable. A bad magic or an over-long payload is a broken stream: the receiver closes the
// connection. A connection starts with a hello (op kHelloOp, empty payload, answered with an empty frame): a
// peer that answers it speaks the fast path (gRPC answers with HTTP/2 bytes, which fail the magic check).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <google/protobuf/message_lite.h>

#include "absl/status/statusor.h"

namespace mcx::distributed {

inline constexpr uint32_t kFastPathMagic = 0x3146434d;  // "MCF1" read as little-endian bytes
inline constexpr size_t kFastPathHeaderBytes = 24;
inline constexpr uint32_t kFastPathMaxPayload = 64u << 20;  // as the gRPC edge's message limit
inline constexpr uint16_t kFlagTransportError = 1;

// The op of the hello; every other op is an Rpc (rpc/handlers.h).
inline constexpr uint16_t kHelloOp = 0;

struct FrameHeader {
  uint32_t length = 0;
  uint16_t op = 0;
  uint16_t flags = 0;
  uint64_t id = 0;
};

// The whole frame (header + payload). Precondition: payload.size() <= kFastPathMaxPayload (callers check).
std::string encode_frame(uint16_t op, uint16_t flags, uint64_t id, std::string_view payload);
// The same with `message` serialized as the payload (without an intermediate copy). Precondition: the message
// serializes to at most kFastPathMaxPayload bytes.
std::string encode_frame(uint16_t op, uint16_t flags, uint64_t id, const google::protobuf::MessageLite& message);
// Parses kFastPathHeaderBytes bytes. DataLoss for a bad magic or a payload over kFastPathMaxPayload.
absl::StatusOr<FrameHeader> decode_frame_header(const char* bytes);

// The host part of a "host:port" or "[v6]:port" address (the fast path listens and connects on the host of
// the gRPC address); "" when it has none.
std::string address_host(std::string_view address);

// TCP_NODELAY, and TCP keepalive probes (after 10 s idle, every 5 s, 2 unanswered = dead) so that a peer host that
// vanished without closing its sockets is noticed, as the gRPC edge's keepalive does. Best effort.
void set_socket_options(int fd);


}  // namespace mcx::distributed
